"""The one door: every UI event and every named API endpoint calls exactly one method here.

Whatever a caller sends (the page's own widgets, ``gradio_client``, or a hand-made HTTP request with any values),
the method checks it with ``rloo_demo.limits`` before anything runs, so a limit or a check lives in one place. The
methods return plain data (dicts, ``RunView``); the tab modules turn it into components, and tests call these
methods without a server.

A run in training is read from memory (its metrics channel and latest rollouts); a run on disk from its folder,
through caches keyed by file stamps, so an idle page costs a few ``stat`` calls per tick whatever the run's size.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import ConfigError, RunConfig, is_valid_run_name
from rloo_demo.errors import Busy, InputError, NotFound, RateLimited, UserError
from rloo_demo.limits import Limits, as_int
from rloo_demo.runner import Runner
from rloo_demo.runs import RolloutIndex, read_jsonl_counted

log = logging.getLogger(__name__)

MAX_OVERLAY_RUNS = 12
MAX_LISTED_RUNS = 500
SAMPLING_WINDOW = 60.0  # seconds over which the sampling share and per-client rates are counted
SAMPLING_WAIT = 30.0  # how long a sampling request waits for the one running before it is told to retry
CACHE_ENTRIES = 64


@dataclass(frozen=True)
class Caller:
    """Who is asking: the browser's client id (kept in its localStorage) or an API caller's ``client_id``, and its
    network address (``ui.common.caller_of``: the last ``X-Forwarded-For`` hop behind a Space's proxy), used for
    per-client rates."""

    client_id: str = ""
    host: str | None = None

    @property
    def key(self) -> str:
        return self.host or self.client_id or "anonymous"


def owner_digest(client_id: str) -> str:
    """What a run's status records about its starter: a hash, so a listed run never reveals a client id."""
    return hashlib.sha256(f"rloo-demo:{client_id}".encode()).hexdigest()[:32]


@dataclass
class RunView:
    """A run as the page sees it, wherever it lives."""

    name: str
    status: str
    error: str | None
    records: list[dict]
    max_steps: int
    elapsed: float | None
    config: RunConfig | None
    live: bool
    reason: str | None = None  # why a stopped run stopped
    skipped_lines: int = 0  # corrupt metrics lines that were skipped

    @property
    def last_step(self) -> int:
        return self.records[-1].get("step", len(self.records)) if self.records else 0


class SamplingGate:
    """Compare and Evaluate share the CPU with training. The gate lets one sampling job run at a time, gives each
    client a number of calls per minute, and while a run trains lets sampling use at most ``sampling_share`` of
    the wall time, so watchers cannot starve the run (gradio's queue also serialises these events)."""

    def __init__(self, limits: Limits, training: Callable[[], bool], clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.training = training
        self.clock = clock
        self._lock = threading.Lock()
        self._busy = threading.Semaphore(1)
        self._calls: dict[str, deque] = {}
        self._spent: deque = deque()  # (end time, seconds) of recent sampling jobs

    def _admit(self, who: str) -> None:
        now = self.clock()
        with self._lock:
            calls = self._calls.setdefault(who, deque())
            while calls and now - calls[0] > SAMPLING_WINDOW:
                calls.popleft()
            rate = self.limits.sampling_per_minute
            if rate is not None and len(calls) >= rate:
                wait = SAMPLING_WINDOW - (now - calls[0])
                raise RateLimited(f"too many samples requested: {rate} a minute per visitor; try again in {wait:.0f} s")
            calls.append(now)
            if len(self._calls) > 10_000:  # forget idle clients
                for key in [k for k, v in self._calls.items() if not v][:5000]:
                    del self._calls[key]

    def _check_share(self) -> None:
        """While a run trains, refuse once sampling has used its share of the last minute. Checked when a job is
        about to run, after the jobs queued before it have run and been counted: checked on arrival, ten visitors
        arriving together would all pass and then run back to back (measured: training 15x slower)."""
        now = self.clock()
        with self._lock:
            while self._spent and now - self._spent[0][0] > SAMPLING_WINDOW:
                self._spent.popleft()
            share = self.limits.sampling_share
            used = sum(s for _, s in self._spent)
            if share is not None and self.training() and used >= share * SAMPLING_WINDOW:
                wait = SAMPLING_WINDOW - (now - self._spent[0][0]) if self._spent else SAMPLING_WINDOW
                raise RateLimited(
                    f"a run is training: sampling has used its share of the CPU ({used:.0f} s of the last minute), "
                    f"so that training stays fast; try again in {wait:.0f} s"
                )

    @contextmanager
    def __call__(self, who: str):
        self._admit(who)
        if not self._busy.acquire(timeout=SAMPLING_WAIT):
            raise Busy("another comparison or evaluation is running; try again in a moment")
        try:
            self._check_share()
        except RateLimited:
            self._busy.release()
            raise
        start = self.clock()
        try:
            yield
        finally:
            self._busy.release()
            with self._lock:
                self._spent.append((self.clock(), self.clock() - start))


class StartGate:
    """At most ``starts_per_minute`` Start attempts per client (each attempt resolves models and may make a run)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits, self.clock = limits, clock
        self._calls: dict[str, deque] = {}
        self._lock = threading.Lock()

    def admit(self, who: str) -> None:
        rate = self.limits.starts_per_minute
        if rate is None:
            return
        now = self.clock()
        with self._lock:
            calls = self._calls.setdefault(who, deque())
            while calls and now - calls[0] > SAMPLING_WINDOW:
                calls.popleft()
            if len(calls) >= rate:
                raise RateLimited(f"too many Start attempts: {rate} a minute per visitor; try again shortly")
            calls.append(now)


class LRU(OrderedDict):
    """A small least-recently-used mapping."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_fresh(self, key):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class Controller:
    def __init__(self, runner: Runner, limits: Limits | None = None):
        self.runner = runner
        self.limits = limits or runner.limits
        self._models = LRU(max(1, self.limits.model_cache))  # model folder -> (model, tokenizer)
        self._models_lock = threading.Lock()
        self._views = LRU(CACHE_ENTRIES)  # run name -> (file stamps, RunView) for runs read from disk
        self._indexes = LRU(CACHE_ENTRIES)  # rollouts.jsonl path -> RolloutIndex
        self._cache_lock = threading.Lock()
        self.sampling = SamplingGate(self.limits, training=lambda: bool(self.runner.active()))
        self.starts = StartGate(self.limits)
        self._exports = Path(tempfile.mkdtemp(prefix="rloo-exports-"))

    # ------------------------------------------------------------------ errors

    def error_text(self, exc: BaseException) -> str:
        """What a caller is told. A ``UserError`` says what to change; anything else is a bug, reported as one
        (the traceback goes to the server log). In public mode no server path is ever shown."""
        if isinstance(exc, ConfigError):
            text = "\n".join(f"- **{_inert(k)}**: {_inert(v)}" for k, v in exc.problems.items())
        elif isinstance(exc, UserError):
            text = _inert(str(exc))
        else:
            log.error("internal error", exc_info=exc)
            text = f"internal error ({type(exc).__name__}); this is a bug in rloo-demo, not in your input"
        return self.redact(text)

    def redact(self, text: str | None) -> str | None:
        """Server paths out of a message (public mode)."""
        if not text or not self.limits.public:
            return text
        for root in sorted({str(Path(self.runner.runs_dir).resolve()), self.runner.runs_dir}, key=len, reverse=True):
            text = text.replace(root, "<runs>")
        return _ABSOLUTE_PATH.sub("<path>", text)

    @staticmethod
    def locale(value) -> str:
        """The page's language from what a caller sent (the browser's, on load): one of ``i18n.LOCALES``, anything
        else English. Only the code is kept, so nothing a caller sends is reflected into the page."""
        from rloo_demo.i18n import normalize

        return normalize(value)

    # ------------------------------------------------------------------ starting and stopping

    def parse_settings(self, settings) -> RunConfig:
        """A RunConfig from the API's JSON text or a dict, checked against its types, its rules and this server's
        limits, all problems at once. Nothing is created and no model is loaded here."""
        config = RunConfig.from_json(settings) if not isinstance(settings, dict) else RunConfig.from_dict(settings)
        # In public mode no file is looked at: the answer never tells whether a path exists on the server.
        problems = config.problems(check_files=not self.limits.public)
        problems.update(self.limits.config_problems(config))
        if config.output_dir != RunConfig().output_dir and self.limits.public:
            problems["output_dir"] = "the server decides where runs are saved"
        if problems:
            raise ConfigError(problems)
        config.output_dir = self.runner.runs_dir
        return config

    def start(self, settings, caller: Caller) -> str:
        """Start a run from settings (JSON text or a dict of RunConfig fields) and return its name. Only a valid
        request counts against the caller's Start rate: refusing a bad one costs nothing."""
        config = self.parse_settings(settings)
        if not isinstance(caller.client_id, str) or not 0 < len(caller.client_id) <= 200:
            raise InputError("a client id (1 to 200 characters) is needed to start a run; it is what may stop it")
        self.starts.admit(caller.key)
        active = self.runner.start(config, caller.client_id, caller.host, owner_digest(caller.client_id))
        return active.name

    def start_from_form(self, values: dict, caller: Caller) -> str:
        from rloo_demo.ui.forms import form_settings

        return self.start(form_settings(values), caller)

    def stop(self, name, caller: Caller, locale: str = "en") -> str:
        from rloo_demo.i18n import t

        if not isinstance(name, str) or not name:
            return t(locale, "train.nothing_to_stop")
        try:
            self.runner.stop(name, caller.client_id)
        except UserError as exc:
            return self.error_text(exc)
        return t(locale, "train.stop_requested", name=name)

    def estimate(self, values: dict, locale: str = "en") -> str:
        """Before Start: how long the run will take here, and whether the compute budget will cut it short."""
        from rloo_demo.prechecks import prerun_warnings
        from rloo_demo.ui.forms import form_settings
        from rloo_demo.ui.views import estimate_text, meter_estimate_text, prechecks_markdown

        try:
            config = self.parse_settings(form_settings(values))
        except UserError as exc:
            return self.error_text(exc)
        step = self.step_seconds(config)
        line = estimate_text(config, step, self.limits.max_run_seconds, locale)
        line += meter_estimate_text(config, step, locale)
        return line + prechecks_markdown(prerun_warnings(config, locale))

    def step_seconds(self, config: RunConfig) -> float:
        """Seconds per step for a config, scaled from the latest finished run of the same policy on this server
        (or from the embedded default measured on 2 cores when there is none)."""
        from rloo_demo.ui.views import DEFAULT_STEP_SECONDS, DEFAULT_STEP_WORK

        work = config.completions_per_step * config.max_new_tokens
        for run in self.runner.runs()[:20]:
            summary_config = self._config_or_none(run)
            if summary_config is None or summary_config.policy != config.policy:
                continue
            records = run.metrics()
            times = [r["step_time"] for r in records[1:] if isinstance(r.get("step_time"), int | float)]
            if len(times) >= 5:
                past = summary_config.completions_per_step * summary_config.max_new_tokens
                return sum(times) / len(times) * work / past
        return DEFAULT_STEP_SECONDS * work / DEFAULT_STEP_WORK

    @staticmethod
    def _config_or_none(run) -> RunConfig | None:
        try:
            return run.config()
        except (UserError, OSError):
            return None

    # ------------------------------------------------------------------ watching

    def default_run(self) -> str | None:
        """The run a fresh page attaches to: the newest one training, else the newest on disk."""
        active = self.runner.latest_active()
        if active is not None:
            return active.name
        runs = self.runner.runs()
        return runs[0].name if runs else None

    def follow(self, name, caller: Caller) -> str | None:
        """The run a page should show on its next tick: its own, unless it watches nothing (or a finished run)
        while another trains. Also the page's heartbeat: its starter's run is not abandoned while it ticks."""
        self.runner.heartbeat(owner=caller.client_id or None)
        name = name if isinstance(name, str) and name else None
        active = self.runner.latest_active()
        if active is not None and active.name != name:
            view = self.view(name)
            if view is None or not view.live:
                return active.name
        return name

    def view(self, name) -> RunView | None:
        """A run's status and metrics; None for no such run. An unreadable run is a view that says so."""
        if not isinstance(name, str) or not name:
            return None
        active = self.runner.get_active(name)
        if active is not None:
            st = active.job.state
            records = st.channel.snapshot()
            status = st.status if st.status != "pending" else "running"  # loading counts as running
            elapsed = (st.finished or time.time()) - (st.started or active.started)
            error = self.redact(st.error)
            return RunView(name, status, error, records, st.config.max_steps, elapsed, st.config, True, st.stop_reason)
        try:
            run = self.runner.run(name)
        except NotFound:
            return None
        stamp = tuple(_stamp(run.path / f) for f in ("status.json", "metrics.jsonl", "config.yaml"))
        with self._cache_lock:
            cached = self._views.get_fresh(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        view = self._read_view(run)
        with self._cache_lock:
            self._views.put(name, (stamp, view))
        return view

    def _read_view(self, run) -> RunView:
        status = run.status()
        reason = run.unreadable()
        if reason:
            return RunView(run.name, f"unreadable: {reason}", None, [], 0, None, None, False)
        config = run.config()
        records, skipped, _ = read_jsonl_counted(run.path / "metrics.jsonl")
        records = [r for r in records if isinstance(r.get("step"), int)]
        elapsed = None
        started = status.get("started")
        if isinstance(started, int | float):
            end = status.get("finished") or status.get("updated") or time.time()
            elapsed = end - started if isinstance(end, int | float) else None
        return RunView(
            run.name,
            status.get("status", "?"),
            self.redact(status.get("error")),
            records,
            config.max_steps,
            elapsed,
            config,
            False,
            status.get("reason"),
            skipped,
        )

    def poll_metrics(self, name, since_step, caller: Caller) -> dict:
        """The API's poll: status and the records after ``since_step`` (a heartbeat for the caller's runs)."""
        self.runner.heartbeat(host=caller.host)
        since = as_int("since_step", since_step, -1, 10**9)
        view = self.view(name)
        if view is None:
            raise NotFound(f"no run named {name!r}" if is_valid_run_name(name) else "no such run")
        return {
            "run": view.name,
            "status": view.status,
            "error": view.error,
            "reason": view.reason,
            "max_steps": view.max_steps,
            "records": [r for r in view.records if r.get("step", 0) > since],
        }

    def _index(self, run) -> RolloutIndex:
        path = run.path / "rollouts.jsonl"
        with self._cache_lock:
            index = self._indexes.get_fresh(str(path))
            if index is None:
                index = RolloutIndex(path)
                self._indexes.put(str(path), index)
        return index

    def rollout_steps(self, name) -> list[int]:
        if not isinstance(name, str) or not name:
            return []
        active = self.runner.get_active(name)
        if active is not None:
            return list(active.job.state.rollout_steps)
        try:
            run = self.runner.run(name)
        except NotFound:
            return []
        if run.unreadable():
            return []
        return self._index(run).steps()

    def rollouts(self, name, step) -> list[dict]:
        """The prompt groups of one step (the latest if ``step`` is None or <= 0)."""
        if not isinstance(name, str) or not name:
            return []
        if step is not None:
            step = as_int("step", step, -(10**9), 10**9)
            step = step if step > 0 else None
        active = self.runner.get_active(name)
        if active is not None:
            st = active.job.state
            if not st.rollout_steps:
                return []
            step = step if step is not None else st.rollout_steps[-1]
            if step in st.rollouts:
                return list(st.rollouts[step])
            if st.run is None:
                return []
            return self._index(st.run).read(step)
        try:
            run = self.runner.run(name)
        except NotFound:
            return []
        if run.unreadable():
            return []
        index = self._index(run)
        steps = index.steps()
        if not steps:
            return []
        return index.read(step if step is not None else steps[-1])

    def get_rollouts(self, name, step) -> dict:
        step = as_int("step", step, -(10**9), 10**9)
        return {"run": name, "steps": self.rollout_steps(name), "groups": self.rollouts(name, step)}

    def list_runs(self) -> list[dict]:
        """Every run on disk with status and key figures, newest first (never the starters' identities)."""
        out = []
        for run in self.runner.runs()[:MAX_LISTED_RUNS]:
            summary = run.summary()
            summary["error"] = self.redact(summary.get("error"))
            out.append(summary)
        return out

    def overlay_records(self, names) -> dict[str, list[dict]]:
        if not isinstance(names, list):
            return {}
        data = {}
        for name in names[:MAX_OVERLAY_RUNS]:
            view = self.view(name)
            if view is not None:
                data[view.name] = view.records
        return data

    def arenas(self) -> list[str]:
        """Arena summaries (``python -m rloo_demo arena``) in the runs folder, newest first."""
        from rloo_demo.arena import ARENA_FILE

        try:
            files = [p.name for p in Path(self.runner.runs_dir).iterdir() if ARENA_FILE.fullmatch(p.name)]
        except OSError:
            return []
        return [name.removesuffix(".json") for name in sorted(files, reverse=True)][:MAX_LISTED_RUNS]

    def arena(self, name) -> dict:
        """One arena's summary: its table (Markdown, inert) and the names of its runs that are still on disk."""
        import json

        from rloo_demo.arena import ARENA_FILE, markdown_table

        if not isinstance(name, str) or not ARENA_FILE.fullmatch(f"{name}.json"):
            raise NotFound("no such arena (its name is arena-<date>-<time>)")
        path = Path(self.runner.runs_dir) / f"{name}.json"
        try:
            if path.stat().st_size > 2_000_000:
                raise NotFound(f"arena {name!r} is too large to show")
            data = json.loads(path.read_text(encoding="utf-8"))
            table = markdown_table(data["rows"], str(data.get("settings", "")))
            runs = [r["run"] for r in data.get("runs", []) if isinstance(r, dict) and is_valid_run_name(r.get("run"))]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise NotFound(f"arena {name!r} cannot be read ({type(exc).__name__})") from None
        on_disk = {r.name for r in self.runner.runs()}
        return {"name": name, "markdown": _inert(table), "runs": [r for r in runs if r in on_disk]}

    def comparable_runs(self) -> list[str]:
        """Runs with a model to compare: every finished run on disk, plus any run training now."""
        names = [a.name for a in self.runner.active()]
        names += [r.name for r in self.runner.runs() if r.model_dir is not None and r.name not in names]
        return names

    def heldout_choices(self, name, limit: int = 40) -> list[str]:
        from rloo_demo.evaluation import heldout_prompts
        from rloo_demo.prompts import prompt_text

        view = self.view(name)
        config = view.config if view is not None and view.config is not None else RunConfig()
        try:  # a chat run's prompts are messages: the dropdown offers their user turns
            return [prompt_text(p) for p in heldout_prompts(config, limit)]
        except UserError:
            return []

    # ------------------------------------------------------------------ models

    def _load(self, name: str):
        from rloo_demo.hub import resolve_model
        from rloo_demo.training import load_policy

        folder = resolve_model(name)
        with self._models_lock:
            cached = self._models.get_fresh(folder)
            if cached is None:
                model, tok = load_policy(folder)
                cached = (model.eval(), tok)
                self._models.put(folder, cached)
            return cached

    def _check_comparable(self, name) -> None:
        """Cheap checks before a sampling job is admitted: a refusal costs the caller none of its rate."""
        if not isinstance(name, str) or not name:
            raise InputError("pick a run first (train one on the Train tab)")
        if self.runner.get_active(name) is None:
            run = self.runner.run(name)
            if run.model_dir is None:
                raise NotFound(f"run {name!r} has no trained model (status: {run.status().get('status')})")

    def models_for(self, name):
        """``(base, trained, tokenizer, config)`` for a run; a live run gives a snapshot between two updates."""
        active = self.runner.get_active(name) if isinstance(name, str) else None
        if active is not None:
            config = active.job.state.config
            base, tok = self._load(config.policy)
            trained = active.job.state.policy_snapshot()
            if trained is None:
                raise Busy(
                    "this run's policy is not available yet (it is loading, or it trains in a subprocess); "
                    "compare again once it has a first step, or when it ends"
                )
            return base, trained, tok, config
        run = self.runner.run(name)
        if run.unreadable():
            raise NotFound(f"run {name!r} is unreadable: {run.unreadable()}")
        config = run.config()
        if run.model_dir is None:
            raise NotFound(f"run {name!r} has no trained model (status: {run.status().get('status')})")
        base, tok = self._load(config.policy)
        trained, _ = self._load(str(run.model_dir))
        return base, trained, tok, config

    def compare(self, name, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller: Caller) -> dict:
        """N samples of base and trained for one prompt with the same seed, each scored by every reward function."""
        from rloo_demo.evaluation import Scorer
        from rloo_demo.judges import base_perplexity, collapse_warning, judge_texts
        from rloo_demo.prompts import as_run_prompt
        from rloo_demo.sampling import sample

        args = self.limits.sampling_request(num_samples, max_new_tokens, temperature, top_p, seed, prompt)
        self._check_comparable(name)
        with self.sampling(caller.key):
            base, trained, tok, config = self.models_for(name)
            scorer = Scorer(config)
            prompt = args["prompt"]
            asked = as_run_prompt(config, prompt)  # the user turn of a chat, as the policy saw its prompts
            out = {"run": name, "prompt": prompt, "seed": args["seed"], "trained_on": scorer.trained.names}
            out["judges"] = {}
            for label, model in (("base", base), ("trained", trained)):
                samples = sample(
                    model,
                    tok,
                    asked,
                    args["num_samples"],
                    args["max_new_tokens"],
                    args["temperature"],
                    args["top_p"],
                    args["seed"],
                )
                texts = [s["text"] for s in samples]
                scores, rewards = scorer([prompt] * len(texts), texts)
                out[label] = [
                    {"text": t, "reward": r, "scores": {n: s[i] for n, s in scores.items()}}
                    for i, (t, r) in enumerate(zip(texts, rewards, strict=True))
                ]
                # judges of the text itself: diversity, repetition and how likely the base model finds it
                judged = judge_texts(texts)
                ids = [s["token_ids"] for s in samples]
                judged["base_perplexity"] = base_perplexity(base, tok, [asked] * len(ids), ids)
                out["judges"][label] = judged
            out["collapse_warning"] = collapse_warning(out["judges"]["trained"], out["judges"]["base"])
        return out

    def probe(self, name, prompt, num_samples, seed, caller: Caller) -> dict:
        """The history of one prompt (the Rollouts tab's probe): K completions from the base policy, from each
        snapshot the run kept and from its latest policy, with the same seed for each. Sampling: it goes through
        the same gate as Compare (one job at a time, a rate per visitor, a share of the CPU while a run trains).
        Snapshots are loaded one at a time and dropped, not cached: they would push Compare's models out."""
        from rloo_demo import snapshots
        from rloo_demo.evaluation import Scorer

        args = self.limits.probe_request(prompt, num_samples, seed)
        if not isinstance(name, str) or not name:
            raise InputError("pick a run first (train one on the Train tab)")
        active = self.runner.get_active(name)
        run = active.job.run if active is not None else self.runner.run(name)
        if active is None and run.unreadable():
            raise NotFound(f"run {name!r} is unreadable: {run.unreadable()}")
        with self.sampling(caller.key):
            config = active.job.state.config if active is not None else run.config()
            base, tok = self._load(config.policy)
            kept = snapshots.list_snapshots(run.path)
            policies = [(0, "base policy (step 0)", lambda: base)]
            for step, folder in kept:
                policies.append((step, f"step {step}", lambda f=folder: snapshots.load_snapshot(f, config.policy)))
            latest = self._latest_policy(active, run)
            if latest is not None and all(step != latest[0] for step, _ in kept):
                policies.append(latest)
            max_new = min(config.max_new_tokens, self.limits.max_compare_tokens)
            steps = snapshots.probe(
                policies,
                tok,
                args["prompt"],
                args["num_samples"],
                max_new,
                args["seed"],
                Scorer(config),
                config.temperature,
                config.top_p,
            )
        return {
            "run": name,
            "prompt": args["prompt"],
            "seed": args["seed"],
            "num_samples": args["num_samples"],
            "max_new_tokens": max_new,
            "snapshot_every": config.snapshot_every,
            "kept": snapshots.KEEP_SNAPSHOTS,
            "steps": steps,
        }

    def _latest_policy(self, active, run):
        """``(step, label, load)`` of a run's newest policy: a copy of the one in training, or the saved model."""
        if active is not None:
            st = active.job.state
            snap = st.policy_snapshot()  # None while loading, or for a run in a subprocess
            if snap is None:
                return None
            last = st.channel.snapshot(max(0, len(st.channel) - 1))
            step = last[-1].get("step", 0) if last else 0
            return (step, f"now (step {step}, training)", lambda: snap)
        if run.model_dir is None:
            return None
        step = run.status().get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else 0
        return (step, f"final (step {step})", lambda: self._load(str(run.model_dir))[0])

    def evaluate(self, name, num_prompts, seed, caller: Caller, progress=None, samples_per_prompt: int = 1) -> dict:
        """Base vs trained on held-out prompts. The result is saved into the run's folder only for the run's own
        starter (and never while it trains): a visitor cannot overwrite another's evaluation or model card."""
        from rloo_demo.evaluation import evaluate, heldout_prompts

        args = self.limits.eval_request(num_prompts, seed)
        self._check_comparable(name)
        with self.sampling(caller.key):
            base, trained, tok, config = self.models_for(name)
            prompts = heldout_prompts(config, args["num_prompts"])
            result = evaluate(base, trained, tok, config, prompts, samples_per_prompt, args["seed"], progress=progress)
        if self.runner.get_active(name) is None:
            run = self.runner.run(name)
            if self.may_write(run, caller):
                run.write_evaluation(result)
                result["saved"] = True
        result.setdefault("saved", False)
        return result

    def may_write(self, run, caller: Caller) -> bool:
        """Only a run's starter (or, on a local server, anyone) changes what is saved in its folder."""
        if not self.limits.public:
            return True
        recorded = run.status().get("owner")
        return bool(caller.client_id) and recorded == owner_digest(caller.client_id)

    # ------------------------------------------------------------------ downloads

    def run_details(self, name) -> tuple[list[str], str, str]:
        """Download files, the reproducing CLI command and config.yaml of a run."""
        from rloo_demo.ui.views import cli_command

        run = self.runner.run(name)
        reason = run.unreadable()
        if reason:
            raise NotFound(f"run {name!r} is unreadable: {reason}")
        files = [str(p) for p in self.export(name)]
        return files, cli_command(run.config()), (run.path / "config.yaml").read_text(encoding="utf-8")

    def export(self, name) -> list[Path]:
        """Copies of a run's files for download, in this server's export folder (gradio serves files from the
        temp folder, not from a runs folder elsewhere on the server). One run's export is kept at a time per name,
        rebuilt only when the run changed, and the folder is bounded: older exports are removed."""
        import csv
        import io
        import zipfile

        run = self.runner.run(name)
        stamp = "-".join(str(_stamp(run.path / f)[0]) for f in ("status.json", "metrics.jsonl", "rollouts.jsonl"))
        digest = hashlib.sha1(stamp.encode()).hexdigest()[:10]
        folder = self._exports / f"{name}-{digest}"
        if not folder.is_dir():
            tmp = self._exports / f".{name}-{digest}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            records = run.metrics()
            keys = sorted({k for r in records for k in r}, key=lambda k: (k != "step", k))
            with open(tmp / f"{name}-metrics.csv", "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys or ["step"])
                writer.writeheader()
                writer.writerows(records)
            shutil.copyfile(run.path / "config.yaml", tmp / f"{name}-config.yaml")
            if (run.path / "rollouts.jsonl").is_file():
                shutil.copyfile(run.path / "rollouts.jsonl", tmp / f"{name}-rollouts.jsonl")
            if run.model_dir is not None:
                buf = io.BytesIO()
                with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                    for p in sorted(run.model_dir.rglob("*")):
                        if p.is_file():
                            z.write(p, Path("model") / p.relative_to(run.model_dir))
                (tmp / f"{name}-model.zip").write_bytes(buf.getvalue())
            tmp.rename(folder)
            self._prune_exports(keep=folder)
        return sorted(folder.iterdir())

    def _prune_exports(self, keep: Path, max_folders: int = 4) -> None:
        folders = sorted(
            (p for p in self._exports.iterdir() if p.is_dir() and p != keep and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in folders[max_folders - 1 :]:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        self.runner.close()
        shutil.rmtree(self._exports, ignore_errors=True)


def _inert(text: str) -> str:
    """No markup from a message: it may quote what a caller sent, and it is shown as Markdown."""
    return html.escape(str(text), quote=False)


_ABSOLUTE_PATH = re.compile(r"(?<![\w/<>])/(?:[\w.@+-]+/)*[\w.@+-]+")


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)
