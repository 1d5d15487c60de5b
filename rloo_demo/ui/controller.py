"""The one door: every UI event and every named API endpoint calls exactly one method here.

Whatever a caller sends (the page's own widgets, ``gradio_client``, or a hand-made HTTP request with any values),
the method checks it with ``rloo_demo.public.limits`` before anything runs, so a limit or a check lives in one
place. The methods return plain data (dicts, ``RunView``); the tab modules turn it into components, and tests call
these methods without a server. The work behind them lives below: the public wing's rate gates (``public.gates``)
and error messages (``public.redaction``), the server's cached reads of runs (``server.readers``), sampling from
runs' policies (``server.inference``) and the builds its pages share (``server.cache.SharedBuilds``), and exports
(``store.export``). A run's settings are checked here once (``parse_settings``); the steps below trust the check.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rloo_demo.config import RunConfig, is_valid_run_name
from rloo_demo.engine.callbacks import run_phase
from rloo_demo.engine.trl_project import zip_trl_project
from rloo_demo.errors import ConfigError, InputError, NotFound, UserError, Waiting
from rloo_demo.i18n import Message, in_locale, normalize, t
from rloo_demo.prechecks import prerun_warnings
from rloo_demo.public.gates import Caller, EventGate, StartGate, owner_digest
from rloo_demo.public.limits import Limits
from rloo_demo.public.redaction import Redactor
from rloo_demo.server.cache import SharedBuilds
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.inference import Inference
from rloo_demo.server.manage import RunManager
from rloo_demo.server.readers import RunReader, RunView
from rloo_demo.server.runner import Runner
from rloo_demo.store.export import export_run
from rloo_demo.store.summary import read_summary, summarize, write_summary
from rloo_demo.ui.forms import form_problems, form_settings, without_refused
from rloo_demo.ui.views import cli_command, estimate_text, meter_estimate_text, prechecks_markdown
from rloo_demo.ui.views.train import run_alerts

__all__ = ["Caller", "Controller", "RunView", "owner_digest"]

READ_MS = 8.0  # what a read reaching the controller without the admission middleware is charged (a poll's cost)


class Controller:
    """One method per UI event or API endpoint; each checks what it is sent, then asks the server layer."""

    def __init__(self, runner: Runner, limits: Limits | None = None):
        self.runner = runner
        self.limits = limits or runner.limits
        self.redactor = Redactor(self.limits.public, runner.runs_dir)
        self.reader = RunReader(runner, self.redactor)
        self.manager = RunManager(runner, self.limits)
        self.inference = Inference(runner, self.limits, self.reader)
        self.starts = StartGate(self.limits)
        self.events = EventGate(self.limits)  # every event's cost; the admission middleware charges it too
        self.builds = SharedBuilds()  # the figures and texts every page of this server shares (the Train tab's)
        self._exports = Path(tempfile.mkdtemp(prefix="rloo-exports-"))
        self._trl_exports = Path(tempfile.mkdtemp(prefix="rloo-trl-exports-"))  # each run's TRL project zip

    # ------------------------------------------------------------------ errors and the page's language

    def error_text(self, exc: BaseException, locale: str = "en", names: dict[str, str] | None = None) -> str:
        """What a caller is told (``public.redaction``), in ``locale``: a ``UserError`` says what to change,
        anything else is a bug reported as one; in public mode no server path is ever shown."""
        return self.redactor.error_text(exc, locale, names)

    def redact(self, text: str | None) -> str | None:
        return self.redactor.redact(text)

    @staticmethod
    def locale(value) -> str:
        """The page's language from what a caller sent (the browser's, on load): one of ``i18n.LOCALES``, anything
        else English. Only the code is kept, so nothing a caller sends is reflected into the page."""
        return normalize(value)

    # ------------------------------------------------------------------ starting and stopping

    def parse_settings(self, settings) -> RunConfig:
        """A RunConfig from the API's JSON text or a dict, checked against its types, its rules and this server's
        limits, all problems at once, placed in the runner's runs folder and marked checked: the steps below trust
        it (``RunConfig.checked``). Nothing is created and no model is loaded here."""
        config = RunConfig.from_json(settings) if not isinstance(settings, dict) else RunConfig.from_dict(settings)
        # In public mode no file is looked at: the answer never tells whether a path exists on the server.
        problems = config.problems(check_files=not self.limits.public)
        problems.update(self.limits.config_problems(config))
        if config.output_dir != RunConfig().output_dir and self.limits.public:
            problems["output_dir"] = Message("controller.output_dir")
        return self.runner.place(config).validate(found=problems)  # refused, or placed and marked checked

    def start(self, settings, caller: Caller) -> str:
        """Start a run from settings (JSON text or a dict of RunConfig fields) and return its name. Only a valid
        request counts against the caller's Start rate: refusing a bad one costs nothing."""
        return self._start(self.parse_settings(settings), caller)

    def _start(self, config: RunConfig, caller: Caller) -> str:
        """Start a config this door checked (``parse_settings``, ``check_form``)."""
        if not isinstance(caller.client_id, str) or not 0 < len(caller.client_id) <= 200:
            raise InputError(Message("controller.client_id"))
        self.starts.admit(caller.key)
        ticket = self.runner.request(config, caller.client_id, caller.host, owner_digest(caller.client_id))
        if ticket.started is None:  # the slot is taken: a place in the line, kept while the page asks
            place = self.runner.line.place(ticket.visitor) or 1
            raise Waiting(self.line_text(place, "en"), place)
        return ticket.started

    def line_text(self, place: int, locale: str = "en") -> str:
        """Where a waiting visitor stands, and about how long until its run starts."""
        wait = _minutes(self.runner.wait_estimate(place))
        return t(locale, "train.waiting", place=place, wait=wait)

    def line_note(self, caller: Caller, locale: str = "en") -> str | None:
        """A page tick's word on its visitor's place in the line (None when it is not waiting), and its heartbeat
        there: a place is kept only while the page asks."""
        visitor = caller.key
        self.runner.line.seen(visitor)
        place, turn = self.runner.turn_of(visitor)
        if place is not None:
            return self.line_text(place, locale)
        if turn is not None and turn.error:
            return t(locale, "train.turn_failed", error=self.redact(in_locale(turn.error, locale)))
        return None

    def check_form(self, values: dict) -> RunConfig:
        """The Train form's values as a checked RunConfig: what the form itself refuses (an emptied box,
        ``forms.form_problems``) and every problem of the settings, together, each field once."""
        own = form_problems(values)
        try:
            config = self.parse_settings(form_settings(values))
        except ConfigError as exc:
            raise ConfigError(own | without_refused(exc.problems, own, values)) from None
        if own:
            raise ConfigError(own)
        return config

    def start_from_form(self, values: dict, caller: Caller) -> str:
        return self._start(self.check_form(values), caller)

    def stop(self, name, caller: Caller, locale: str = "en") -> str:
        """Stop the caller's run. A page that watches no run, or one that is not training (finished, another
        visitor's run on disk, a name that is no run), is told in its language that there is nothing to stop; a
        run's name is echoed only where it is one."""
        if not isinstance(name, str) or not name or self.runner.get_active(name) is None:
            if is_valid_run_name(name):
                return t(locale, "train.not_training", name=name)
            return t(locale, "train.nothing_to_stop")
        try:
            self.runner.stop(name, caller.client_id)
        except UserError as exc:
            return self.error_text(exc, locale)
        return t(locale, "train.stop_requested", name=name)

    def estimate(self, values: dict, locale: str = "en") -> str:
        """Before Start: how long the run will take here, and whether the compute budget will cut it short; a form
        this server refuses is answered with the refusal."""
        try:
            config = self.check_form(values)
        except UserError as exc:
            return self.error_text(exc, locale)
        return self.estimate_checked(config, locale)

    def estimate_checked(self, config: RunConfig, locale: str = "en") -> str:
        """``estimate`` of a config this door checked (``check_form``'s): the Train form's handler checks the form
        once, to show a refusal by the fields' labels or this."""
        if not config.checked():  # a bug of the caller's, not a user's mistake
            raise ValueError("estimate_checked takes a config the controller checked (check_form)")
        speed = run_speed(config, self.reader)  # this server's measured speed (server.estimate)
        line = estimate_text(config, speed.step, self.limits.max_run_seconds, locale, speed)
        line += meter_estimate_text(config, speed.step, locale)
        return line + prechecks_markdown(prerun_warnings(config, locale))

    def trains_for(self, caller: Caller) -> bool:
        """Whether a run of this caller is training now: started with its client id or from its address (its
        page's Start is then disabled: the runner refuses a visitor a second run while one of its own trains)."""
        return self.reader.own_active(caller) is not None

    def slot_note(self, caller: Caller, locale: str = "en") -> str | None:
        """A page's word on the training slot when it is taken by another visitor's run: that run's progress, and
        that Start takes a place in the line rather than starting now (on a one-slot server Start stays enabled,
        and this says what it will do). None when the slot is free or the caller's own run trains."""
        active = self.runner.active()
        if len(active) < self.runner.max_concurrent or self.reader.own_active(caller) is not None:
            return None
        theirs = max(active, key=lambda a: a.started)
        place = len(self.runner.line) + 1
        wait = _minutes(self.runner.wait_estimate(place))
        step, steps = theirs.latest_step(), theirs.config.max_steps
        return t(locale, "train.slot_busy", step=step, max_steps=steps, place=place, wait=wait)

    def run_phase(self, name) -> str | None:
        """What a run in training does before its first step is logged (``engine.callbacks.run_phase``); None for a
        run not training here, or one whose steps are being logged."""
        active = self.runner.get_active(name) if isinstance(name, str) and name else None
        if active is None or active.steps_logged():
            return None
        state = getattr(active.job, "state", None)  # a subprocess job has none to read: it says "loading"
        phase = run_phase(getattr(state, "trainer", None))
        return None if phase == "training" else phase

    def run_summary(self, name, locale: str = "en") -> tuple[dict, list[dict]] | None:
        """An ended run's summary (``store.summary``) and its warnings; saved into its folder as summary.json the
        first time it is asked for. None while the run trains, or for a run with no steps."""
        view = self.reader.view(name)
        if view is None or view.live or view.status not in ("finished", "stopped", "failed") or not view.records:
            return None
        alerts = run_alerts(view.records, locale)
        folder = self.runner.run(name).path
        summary = read_summary(folder)
        if summary is None:
            summary = summarize(view.records)
            summary["alerts"] = [{"kind": a["kind"], "step": a["step"]} for a in run_alerts(view.records)]
            try:
                write_summary(folder, summary)
            except OSError:  # a full or read-only disk: the page still shows it
                pass
        return summary, alerts

    # ------------------------------------------------------------------ watching

    # Reads take the caller: each is charged ``READ_MS`` to the caller's event budget (``Limits.event_ms_per_minute``,
    # ``EventGate``), refused before anything is read. An event counts once, at its first read (a page tick at
    # ``follow``); None: not counted. On a live server the admission middleware charges every event to this same
    # budget before gradio touches it and marks the caller (``Caller.admitted``), so it is not charged twice.

    def _read(self, caller: Caller | None) -> None:
        if caller is not None and not caller.admitted:
            self.events.admit(caller.key, READ_MS)

    def default_run(self, caller: Caller | None = None) -> str | None:
        self._read(caller)
        return self.reader.default_run(caller)

    def follow(self, name, caller: Caller) -> str | None:
        self._read(caller)
        return self.reader.follow(name, caller)

    def view(self, name, caller: Caller | None = None) -> RunView | None:
        self._read(caller)
        return self.reader.view(name)

    def poll_metrics(self, name, since_step, caller: Caller) -> dict:
        self._read(caller)
        return self.reader.poll_metrics(name, since_step, caller)

    def rollout_steps(self, name, caller: Caller | None = None) -> list[int]:
        self._read(caller)
        return self.reader.rollout_steps(name)

    def rollouts(self, name, step, caller: Caller | None = None) -> list[dict]:
        self._read(caller)
        return self.reader.rollouts(name, step)

    def get_rollouts(self, name, step, caller: Caller | None = None) -> dict:
        self._read(caller)
        return self.reader.get_rollouts(name, step)

    def list_runs(self, caller: Caller | None = None) -> list[dict]:
        self._read(caller)
        return self.reader.list_runs()

    def overlay_records(self, names, caller: Caller | None = None) -> dict[str, list[dict]]:
        self._read(caller)
        return self.reader.overlay_records(names)

    def arenas(self, caller: Caller | None = None) -> list[str]:
        self._read(caller)
        return self.reader.arenas()

    def arena(self, name, caller: Caller | None = None) -> dict:
        self._read(caller)
        return self.reader.arena(name)

    def comparable_runs(self, caller: Caller | None = None) -> list[str]:
        self._read(caller)
        return self.reader.comparable_runs()

    def comparable_choices(self, caller: Caller | None = None) -> list[tuple[str, str]]:
        """``comparable_runs`` as a picker's ``(shown, run name)`` pairs: a run's label beside its name."""
        names = self.comparable_runs(caller)
        labels = self.reader.labels()
        return [(f"{labels[n]} · {n}" if n in labels else n, n) for n in names]

    # ------------------------------------------------------------------ labels, notes, deleting (server.manage)

    # Each refuses in public mode unless the run is the caller's own, and always while the run trains.

    def run_notes(self, name, caller: Caller | None = None) -> dict:
        self._read(caller)
        return self.reader.run_notes(name)

    def may_manage(self, name, caller: Caller) -> bool:
        return self.manager.may_manage(name, caller)

    def label_run(self, name, label, note, caller: Caller) -> dict:
        """Rename (a label shown beside the run's name) and/or annotate a run; None keeps either as it is."""
        self._read(caller)
        return self.manager.set_notes(name, label, note, caller)

    def delete_run(self, name, caller: Caller) -> str:
        self._read(caller)
        return self.manager.delete(name, caller)

    # ------------------------------------------------------------------ sampling from runs' policies

    def heldout_choices(self, name, limit: int = 40, caller: Caller | None = None) -> list[str]:
        self._read(caller)
        return self.inference.heldout_choices(name, limit)

    def compare(self, name, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller: Caller) -> dict:
        return self.inference.compare(name, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller)

    def probe(self, name, prompt, num_samples, seed, caller: Caller) -> dict:
        return self.inference.probe(name, prompt, num_samples, seed, caller)

    def evaluate(self, name, num_prompts, seed, caller: Caller, progress=None, samples_per_prompt: int = 1) -> dict:
        return self.inference.evaluate(name, num_prompts, seed, caller, progress, samples_per_prompt)

    # ------------------------------------------------------------------ downloads

    def run_details(self, name) -> tuple[list[str], str, str]:
        """Download files, the reproducing CLI command and config.yaml of a run."""
        run = self.runner.run(name)
        reason = run.unreadable()
        if reason:
            raise NotFound(Message("controller.unreadable", name=repr(name), reason=reason))
        files = [str(p) for p in self.export(name)]
        config = run.config()
        if self.limits.public:  # the server's own folder is no one else's to write to (nor to be shown)
            config.output_dir = RunConfig().output_dir
        return files, cli_command(config), (run.path / "config.yaml").read_text(encoding="utf-8")

    def export(self, name) -> list[Path]:
        """Copies of a run's files for download, in this server's export folder (``store.export``)."""
        return export_run(self.runner.run(name), self._exports)

    def trl_project(self, name) -> Path | None:
        """A finished or stopped run as a TRL project's zip (``engine.trl_project``), built as the other exports."""
        return next(iter(export_run(self.runner.run(name), self._trl_exports, zip_trl_project)), None)

    def close(self) -> None:
        self.runner.close()
        shutil.rmtree(self._exports, ignore_errors=True)
        shutil.rmtree(self._trl_exports, ignore_errors=True)


def _minutes(seconds: float) -> str:
    """A wait in words a page can show: seconds under a minute, else whole minutes."""
    return f"{max(1, round(seconds))} s" if seconds < 60 else f"{round(seconds / 60)} min"
