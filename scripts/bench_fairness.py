"""Fair share between visitors of a public Space, measured: the scenarios of issue 25 that ``bench_load.py`` does not
run itself (it runs the 8 readers, the queue flood and the session churn).

    python scripts/bench_fairness.py                   # all four (about 5 minutes on 2 cores)
    python scripts/bench_fairness.py --only hogger,xff

- ``hogger``: visitor A (127.0.0.2) starts a short run again the moment each ends; visitor B (127.0.0.3) asks for
  the slot once A's first run trains, and keeps polling. Reported: how many of A's runs ended before B's started
  (target: at most one), and B's wait.
- ``xff``: A asks for 30 Compares in a row, each with a new forged ``X-Forwarded-For``. Reported: how many were
  admitted (at most the per-visitor 12 a minute: the header from a connection that is no trusted proxy is ignored).
- ``prune``: B's run finishes, then A makes ``--prune-runs`` one-step runs. Reported: whether B's run is still on
  disk and how many of A's are (at most ``RLOO_MAX_RUNS_PER_VISITOR``).
- ``downloads``: B selects the finished run's downloads 20 times and a training run's 20 times. Reported: the growth
  of gradio's file cache (one copy of the finished run's files; none for the training run).

The app runs as the image runs it (``bench_load.Served``: public mode, runs outside the working folder and /tmp).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import Served, _client  # noqa: E402

A, B = "127.0.0.2", "127.0.0.3"
SHORT = {"max_steps": 3, "prompts_per_step": 1, "max_new_tokens": 8}


def answer(app: Served, http, name: str, data: list, session: str, timeout: float = 300.0, headers=None):
    """One queued event's output (its first value), or ``{"refused": status}`` when the join is refused."""
    body = app.body(name, data, session)
    joined = http.post(app.url + "gradio_api/queue/join", json=body, headers=headers)
    if joined.status_code != 200:
        return {"refused": joined.status_code}
    event, deadline = joined.json()["event_id"], time.time() + timeout
    with http.stream("GET", app.url + "gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                    return ((msg.get("output") or {}).get("data") or [None])[0]
            if time.time() > deadline:
                break
    raise TimeoutError(name)


def status(app: Served, http, run: str, session: str) -> str:
    polled = answer(app, http, "poll_metrics", [run, 10**9], session)
    return polled.get("status", "?") if isinstance(polled, dict) else "?"


def hogger(app: Served, seconds: float = 300.0) -> dict:
    """A restarts on finish; B asks once A trains and keeps polling (a place in the line is kept while it does)."""
    out: dict = {"a_runs_before_b": None, "b_wait_s": None}
    with _client(A) as a, _client(B) as b:
        a_runs, a_ended, current, asked, b_run = set(), 0, None, None, None
        deadline = time.time() + seconds
        while time.time() < deadline and b_run is None:
            if current is None or status(app, a, current, "a") != "running":
                if current is not None:
                    a_ended, current = a_ended + 1, None
                started = answer(app, a, "start_run", [json.dumps(SHORT), "a-page"], "a")  # again, at once
                current = started.get("run") if isinstance(started, dict) else None
                a_runs |= {current} if current else set()
            if asked is None and current is not None:
                asked = time.time()
                first = answer(app, b, "start_run", [json.dumps(SHORT), "b-page"], "b")
                out["b_first_answer"] = {k: first.get(k) for k in ("waiting", "run") if k in first}
                b_run = first.get("run")
            elif asked is not None:
                if current is not None:
                    answer(app, b, "poll_metrics", [current, 10**9], "b")  # B's sign of life keeps its place
                listed = answer(app, b, "list_runs", [], "b")
                running = (
                    [r["name"] for r in listed if r.get("status") == "running"] if isinstance(listed, list) else []
                )
                b_run = next((n for n in running if n not in a_runs), None)
            time.sleep(1.0)
        if b_run is not None:
            out["a_runs_before_b"], out["b_wait_s"] = a_ended, round(time.time() - asked, 1)
            while status(app, b, b_run, "b") == "running":
                time.sleep(1.0)
        out["target"] = "B trains within one of A's runs (a_runs_before_b <= 1)"
    return out


def xff(app: Served, run: str, calls: int = 30) -> dict:
    admitted = 0
    with _client(A) as a:
        for i in range(calls):
            forged = {"X-Forwarded-For": f"203.0.113.{i}"}
            got = answer(app, a, "compare", [run, "This movie was", 1, 0], f"x{i}", headers=forged)
            admitted += isinstance(got, dict) and "base" in got
    return {"compares_sent": calls, "admitted": admitted, "target": "at most 12 (sampling_per_minute)"}


def run_to_end(app: Served, http, session: str, settings: dict) -> str:
    for _ in range(100):  # a visitor has 4 Starts a minute, and the slot may be busy: ask again (keeps the place)
        started = answer(app, http, "start_run", [json.dumps(settings), f"{session}-page"], session)
        if "run" in started or not ("too many Start" in str(started.get("error")) or "waiting" in started):
            break
        time.sleep(3)
    mine = re.search(r"your run (\S+) is still training", str(started.get("error")))
    if mine:  # its place in the line came up between two asks: the run started by itself
        started = {"run": mine.group(1)}
    if "run" not in started:
        raise RuntimeError(f"no run started: {started}")
    run = started["run"]
    while status(app, http, run, session) == "running":
        time.sleep(0.5)
    return run


def prune(app: Served, runs: int) -> dict:
    with _client(B) as b, _client(A) as a:
        kept = run_to_end(app, b, "b", {"max_steps": 1, "prompts_per_step": 1, "max_new_tokens": 4})
        made = []
        for _ in range(runs):
            made.append(run_to_end(app, a, "a", {"max_steps": 1, "prompts_per_step": 1, "max_new_tokens": 4}))
    on_disk = {p.name for p in app.runs.iterdir() if p.is_dir()}
    return {
        "a_runs_made": runs,
        "a_runs_on_disk": len(on_disk & set(made)),
        "b_run_kept": kept in on_disk,
        "target": "B's run kept; A's own oldest pruned first",
    }


CACHE = Path.home() / ".rloo-demo-bench" / "gradio-cache"  # the app's GRADIO_TEMP_DIR here


def cache_bytes(app: Served) -> int:
    return sum(p.stat().st_size for p in CACHE.rglob("*") if p.is_file())


def downloads(app: Served, finished: str) -> dict:
    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder

    training = RunFolder.create(RunConfig(output_dir=str(app.runs), run_name="still-training"))
    with _client(B) as b:
        answer(app, b, "runs_refresh", [[], None], "d")
        before = cache_bytes(app)
        for step in range(20):
            training.append_metrics({"step": step + 1, "reward": 0.1})
            answer(app, b, "runs_details", ["still-training"], "d")
        after_training = cache_bytes(app)
        answer(app, b, "runs_details", [finished], "d")
        after_one = cache_bytes(app)
        for _ in range(19):
            answer(app, b, "runs_details", [finished], "d")
        after_finished = cache_bytes(app)
    return {
        "cache_growth_training_run_x20_bytes": after_training - before,
        "cache_growth_finished_run_first_bytes": after_one - after_training,
        "cache_growth_finished_run_next_19_bytes": after_finished - after_one,
        "target": "nothing for a training run; one copy of a finished run's files",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="hogger,xff,prune,downloads", help="comma-separated scenarios")
    ap.add_argument("--prune-runs", type=int, default=6, help="with prune: one-step runs A makes")
    args = ap.parse_args()
    only = set(args.only.split(","))
    shutil.rmtree(CACHE, ignore_errors=True)
    app = Served(RLOO_SESSION_SECONDS="1800", GRADIO_TEMP_DIR=str(CACHE))
    out: dict = {}
    try:
        if "hogger" in only:
            out["hogger"] = hogger(app)
        finished = None
        if {"xff", "downloads", "prune"} & only:
            with _client("127.0.0.4") as c:
                finished = run_to_end(app, c, "c", {"max_steps": 2, "prompts_per_step": 1, "max_new_tokens": 8})
        if "xff" in only:
            out["xff"] = xff(app, finished)
        if "downloads" in only:
            out["downloads"] = downloads(app, finished)
        if "prune" in only:
            out["prune"] = prune(app, args.prune_runs)
    finally:
        app.close()
        print(json.dumps(out, indent=2), flush=True)  # what was measured, also when a scenario failed
    return 0


if __name__ == "__main__":
    sys.exit(main())
