"""Runs as a page or an API caller reads them, wherever they live, through caches keyed by file stamps.

A run in training is read from memory (``ActiveRun``: its metrics channel and latest rollouts); a run on disk from
its folder, through caches keyed by file stamps, so an idle page costs a few ``stat`` calls per tick whatever the
run's size. Arena summaries in the runs folder are read here too.

What a page watches depends on whose server it is. On a local server (one user) a fresh page attaches to the newest
run, and follows any run that starts: they are all its user's. On a public server the runs are other people's: a
fresh page attaches only to its visitor's own (``owns``: the same client id, which a reload keeps, or the same
address, by which the slot's rules know a visitor), and others' runs stay in the Runs tab.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.arena import ARENA_FILE, markdown_table
from rloo_demo.config import RunConfig, is_valid_run_name, text_problem
from rloo_demo.errors import InputError, NotFound
from rloo_demo.i18n import Message
from rloo_demo.public.gates import Caller, owner_digest
from rloo_demo.public.limits import as_int
from rloo_demo.public.redaction import Redactor, inert
from rloo_demo.public.retention import visitor_digest
from rloo_demo.server.cache import LRU
from rloo_demo.server.cache import stamp as file_stamp
from rloo_demo.server.runner import ActiveRun, Runner
from rloo_demo.store.folder import stop_reason
from rloo_demo.store.jsonl import RolloutIndex, read_jsonl_counted
from rloo_demo.store.labels import notes_stamp, read_notes

MAX_OVERLAY_RUNS = 12
MAX_LISTED_RUNS = 500
CACHE_ENTRIES = 64
# Before a server has timed a run of a policy, the estimate scales from the embedded default's step on 2 cores
# (16 completions of 24 tokens; docs/benchmarks.md has the measurement and its command).
DEFAULT_STEP_SECONDS = 0.65
DEFAULT_STEP_WORK = 16 * 24


POLL_RECORDS = 200  # records in one /poll_metrics answer (about 180 kB)


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


class RunReader:
    """Cached, read-only views of the runs on this server: the one place the page's and the API's reads of run
    folders go through."""

    def __init__(self, runner: Runner, redactor: Redactor):
        self.runner = runner
        self.redact = redactor.redact
        self._views = LRU(CACHE_ENTRIES)  # run name -> (file stamps, RunView) for runs read from disk
        self._indexes = LRU(CACHE_ENTRIES)  # rollouts.jsonl path -> RolloutIndex
        self._steps = LRU(CACHE_ENTRIES)  # (rollouts.jsonl path, step) -> (its byte ranges, the parsed groups)
        self._listed: tuple | None = None  # (the listed runs' stamps, list_runs's answer)
        self._starters = LRU(CACHE_ENTRIES)  # run name -> (status.json's stamp, its starter's (owner, visitor) hashes)
        self._cache_lock = threading.Lock()

    def step_seconds(self, config: RunConfig) -> float:
        """Seconds per step for a config, scaled from the latest finished run of the same policy on this server
        (or from the embedded default measured on 2 cores when there is none)."""
        work = config.completions_per_step * config.max_new_tokens
        for run in self.runner.runs()[:20]:
            view = self.view(run.name)  # cached by file stamps: an estimate per form change re-reads nothing
            summary_config = view.config if view is not None else None
            if summary_config is None or summary_config.policy != config.policy:
                continue
            records = view.records
            times = [r["step_time"] for r in records[1:] if isinstance(r.get("step_time"), int | float)]
            if len(times) >= 5:
                past = summary_config.completions_per_step * summary_config.max_new_tokens
                return sum(times) / len(times) * work / past
        return DEFAULT_STEP_SECONDS * work / DEFAULT_STEP_WORK

    def default_run(self, caller: Caller | None = None) -> str | None:
        """The run a fresh page attaches to: the newest one training, else the newest on disk; on a public server
        only the caller's own (none: the page starts empty, and says so)."""
        if self.runner.limits.public:
            own = self.own_active(caller)
            if own is not None:
                return own.name
            return next((r.name for r in self.runner.runs()[:MAX_LISTED_RUNS] if self._started_by(r, caller)), None)
        active = self.runner.latest_active()
        if active is not None:
            return active.name
        runs = self.runner.runs()
        return runs[0].name if runs else None

    def follow(self, name, caller: Caller) -> str | None:
        """The run a page should show on its next tick: its own, unless it watches nothing (or a finished run)
        while another trains: on a local server any other, on a public one only the caller's own. Also the page's
        heartbeat: its starter's run is not abandoned while it ticks."""
        self.runner.heartbeat(owner=caller.client_id or None)
        name = name if isinstance(name, str) and name else None
        _, turn = self.runner.turn_of(caller.key)
        if turn is not None and turn.started and turn.started != name and self.runner.get_active(turn.started):
            return turn.started  # the visitor's place in the line became a run: its page shows it
        active = self.own_active(caller) if self.runner.limits.public else self.runner.latest_active()
        if active is not None and active.name != name:
            view = self.view(name)
            if view is None or not view.live:
                return active.name
        return name

    def own_active(self, caller: Caller | None) -> ActiveRun | None:
        """The newest run in training that the caller started (``owns``), or None."""
        own = [a for a in self.runner.active() if owns(caller, a.owner, a.visitor)]
        return max(own, key=lambda a: a.started) if own else None

    def _started_by(self, run, caller: Caller | None) -> bool:
        """Whether a run on disk is the caller's: its status.json's starter hashes, read once per change of it."""
        if caller is None:
            return False
        stamp = file_stamp(run.path / "status.json")
        with self._cache_lock:
            cached = self._starters.get_fresh(run.name)
        if cached is None or cached[0] != stamp:
            status = run.status()
            cached = (stamp, (status.get("owner"), status.get("visitor")))
            with self._cache_lock:
                self._starters.put(run.name, cached)
        owner, visitor = cached[1]
        return owns_record(caller, owner, visitor)

    def view(self, name) -> RunView | None:
        """A run's status and metrics; None for no such run. An unreadable run is a view that says so."""
        if not isinstance(name, str) or not name:
            return None
        active = self.runner.get_active(name)
        if active is not None:
            now = active.status()
            error, config = self.redact(now["error"]), active.config
            return RunView(
                name,
                now["status"],
                error,
                active.records(),
                config.max_steps,
                now["elapsed"],
                config,
                True,
                now["reason"],
            )
        try:
            run = self.runner.run(name)
        except NotFound:
            return None
        stamp = tuple(file_stamp(run.path / f) for f in ("status.json", "metrics.jsonl", "config.yaml"))
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
            stop_reason(status),  # a Message where it can be one: the page translates it
            skipped,
        )

    def poll_metrics(self, name, since_step, caller: Caller) -> dict:
        """The API's poll: status and the records after ``since_step``, at most ``POLL_RECORDS`` of them (``more``:
        there are others after them; poll again from the last one's step), and a heartbeat for the caller's runs.
        A page of records bounds what one poll costs: a 600-step run's whole record list was 530 kB of JSON, and
        8 clients polling it from step 0 slowed a training step 7x (``scripts/bench_load.py --readers 8``)."""
        self.runner.heartbeat(host=caller.host)
        since = as_int("since_step", since_step, -1, 10**9)
        view = self.view(name)
        if view is None:
            missing = Message("runner.no_run", name=repr(name)) if is_valid_run_name(name) else None
            raise NotFound(missing or Message("readers.no_such_run"))
        after = [r for r in view.records if r.get("step", 0) > since]
        return {
            "run": view.name,
            "status": view.status,
            "error": view.error,
            "reason": str(view.reason) if view.reason is not None else None,
            "max_steps": view.max_steps,
            "records": after[:POLL_RECORDS],
            "more": len(after) > POLL_RECORDS,
        }

    def _readable_run(self, name):
        """The folder of a run on disk that can be shown, or None: whether it is readable comes from its cached
        view (a few ``stat`` calls), not from parsing its status and config again at every read."""
        try:
            run = self.runner.run(name)
        except NotFound:
            return None
        view = self.view(name)
        return run if view is not None and not view.status.startswith("unreadable") else None

    def _read_step(self, index: RolloutIndex, step: int) -> list[dict]:
        """One step's groups from disk, parsed once: a step's lines never change once written (the file is only
        appended to), so the parse is cached by the file's identity and the byte ranges of the step."""
        groups_at = index.offsets.get(step)
        stamp = file_stamp(index.path)
        key = (str(index.path), step)
        ident = (stamp[2], tuple(groups_at or ()))
        with self._cache_lock:
            cached = self._steps.get_fresh(key)
        if cached is not None and cached[0] == ident:
            return list(cached[1])
        groups = index.read(step)
        with self._cache_lock:
            self._steps.put(key, (ident, groups))
        return list(groups)

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
            return active.rollout_steps()
        run = self._readable_run(name)
        return self._index(run).steps() if run is not None else []

    def rollouts(self, name, step) -> list[dict]:
        """The prompt groups of one step (the latest if ``step`` is None or <= 0)."""
        if not isinstance(name, str) or not name:
            return []
        if step is not None:
            step = as_int("step", step, -(10**9), 10**9)
            step = step if step > 0 else None
        active = self.runner.get_active(name)
        if active is not None:
            groups = active.rollouts(step)
            if groups is not None:
                return groups
            if active.run is None:
                return []
            index = self._index(active.run)
            steps = index.steps()  # brings the index up to date
            return self._read_step(index, step if step is not None else steps[-1]) if steps else []
        run = self._readable_run(name)
        if run is None:
            return []
        index = self._index(run)
        steps = index.steps()
        if not steps:
            return []
        return self._read_step(index, step if step is not None else steps[-1])

    def get_rollouts(self, name, step) -> dict:
        """The API's rollouts: the run's steps and one step's groups. A name that is not a text an answer can
        carry is refused (echoed, a lone surrogate broke the answer's JSON and the caller's whole event stream)."""
        if isinstance(name, str) and text_problem(name):
            raise InputError(Message("value.bad_text", name="run", problem=text_problem(name)))
        step = as_int("step", step, -(10**9), 10**9)
        shown = name if is_valid_run_name(name) else None
        return {"run": shown, "steps": self.rollout_steps(name), "groups": self.rollouts(name, step)}

    def list_runs(self) -> list[dict]:
        """Every run on disk with status and key figures, newest first (never the starters' identities). The
        listing and each summary are cached by file stamps (``store.listing``, ``RunFolder.summary``), and the
        whole answer by theirs: a list of 30 runs re-reads nothing that has not changed."""
        runs = self.runner.runs()[:MAX_LISTED_RUNS]
        key = tuple((run.name, run.summary_stamps(), notes_stamp(run)) for run in runs)
        with self._cache_lock:
            cached = self._listed
        if cached is not None and cached[0] == key:
            return [dict(s) for s in cached[1]]
        out = []
        for run in runs:
            summary = run.summary()
            summary["error"] = self.redact(summary.get("error"))
            summary.update(read_notes(run))  # its label and note (store.labels), which a person may change
            out.append(summary)
        with self._cache_lock:
            self._listed = (key, out)
        return [dict(s) for s in out]

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
        try:
            files = [p.name for p in Path(self.runner.runs_dir).iterdir() if ARENA_FILE.fullmatch(p.name)]
        except OSError:
            return []
        return [name.removesuffix(".json") for name in sorted(files, reverse=True)][:MAX_LISTED_RUNS]

    def arena(self, name) -> dict:
        """One arena's summary: its table (Markdown, inert) and the names of its runs that are still on disk."""
        if not isinstance(name, str) or not ARENA_FILE.fullmatch(f"{name}.json"):
            raise NotFound(Message("readers.no_arena"))
        path = Path(self.runner.runs_dir) / f"{name}.json"
        try:
            if path.stat().st_size > 2_000_000:
                raise NotFound(Message("readers.arena_large", name=repr(name)))
            data = json.loads(path.read_text(encoding="utf-8"))
            table = markdown_table(data["rows"], str(data.get("settings", "")))
            runs = [r["run"] for r in data.get("runs", []) if isinstance(r, dict) and is_valid_run_name(r.get("run"))]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise NotFound(Message("readers.arena_unreadable", name=repr(name), kind=type(exc).__name__)) from None
        on_disk = {r.name for r in self.runner.runs()}
        return {"name": name, "markdown": inert(table), "runs": [r for r in runs if r in on_disk]}

    def run_notes(self, name) -> dict:
        """A run's label and note (empty texts where it has none); ``NotFound`` for no such run."""
        return read_notes(self.runner.run(name))

    def labels(self) -> dict[str, str]:
        """The label of every labelled run on disk, by name (from the cached listing)."""
        return {s["name"]: s["label"] for s in self.list_runs() if s.get("label")}

    def comparable_runs(self) -> list[str]:
        """Runs with a model to compare: every finished run on disk, plus any run training now."""
        names = [a.name for a in self.runner.active()]
        names += [r.name for r in self.runner.runs() if r.model_dir is not None and r.name not in names]
        return names


def owns(caller: Caller | None, owner: str | None, visitor: str | None) -> bool:
    """Whether a run in training is the caller's: started with its client id (``owner``, which a reload keeps) or
    by its visitor (``visitor``, the address: Start refuses a second run of it while this one trains)."""
    if caller is None:
        return False
    if caller.client_id and owner == caller.client_id:
        return True
    key = caller.host or caller.client_id
    return bool(key) and visitor == key


def owns_record(caller: Caller, owner: str | None, visitor: str | None) -> bool:
    """``owns`` for a run on disk, whose status.json keeps hashes of its starter (``gates.owner_digest``,
    ``retention.visitor_digest``), never the client id or the address."""
    key = caller.host or caller.client_id
    if key and visitor and visitor == visitor_digest(key):
        return True
    try:
        return bool(caller.client_id and owner) and owner == owner_digest(caller.client_id)
    except InputError:  # a client id that is not a text a hash is taken of: nobody's
        return False
