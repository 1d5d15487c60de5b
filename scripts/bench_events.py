"""Every event of the page, flooded beside a training run: how much each one slows the step.

    python scripts/bench_events.py                          # each event by 8 visitors, then 1 visitor cycling all
    python scripts/bench_events.py --events page_load,train_estimate --rounds 2
    python scripts/bench_events.py --costs                  # no run: each event's server CPU per call

The app starts as ``python app.py`` with ``RLOO_PUBLIC=1`` (the image's mode, its limits as shipped) and its runs
folder outside the working folder and /tmp, with 30 finished runs on disk (one with a model, so that an export has
something to zip). One run trains through every phase. For each event (gradio's 55, the page's own and the named
endpoints), ``--rounds`` times: a quiet phase, then ``--visitors`` visitors, each from its own loopback address
(127.0.0.2, 127.0.0.3, ...) and its own session, send that event as fast as the server answers, with the values
the page itself sends (each input's default; a run picker set to a run on disk after the tab's own refresh). The
visitors run niced in a child process, so their own CPU does not count against the server. A round's slowdown is
the median step of its flood over the median step of the quiet phases around it; the event's is the mean over
rounds. Then one visitor cycles through all the events for ``--cycle-seconds``.

``--costs`` measures, with no run training, the server's CPU time per answered call of each event (one visitor,
calls back to back): what ``rloo_demo.ui.api.EVENT_COSTS`` is set from. Each event's line says what the budget
charges it, and ``under_charged`` where it costs more than that.

Goals: at most 1.3x for any event flooded by 8 visitors, at most 1.5x for one visitor cycling through them all
(an idle machine: a shared one's own load moves the step by more than that).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
from bench_load import (  # noqa: E402
    RUN,
    post_api,
    space_app,
    step_times,
    steps_between,
    synth_runs,
    wait_finished,
    wait_serving,
)

from rloo_demo.ui.api import DEFAULT_EVENT_COST, EVENT_COSTS  # noqa: E402

FLOOD = r"""
import json, sys, threading, time
import httpx
url, events, visitors = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
seconds, run, mode = float(sys.argv[4]), sys.argv[5], sys.argv[6]
config = httpx.get(url + "config", timeout=30).json()
comps = {c["id"]: c for c in config["components"]}
deps = {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}
RUN_PICKERS = {"compare-run", "runs-detail", "rollout-run"}

def values(name, cid, setup=False):
    # what the page sends: each input's default, a state as null, the client id, run pickers set to the run (none
    # yet in a set-up call: the tab's refresh gives the pickers their choices)
    out = []
    for i in deps[name]["inputs"]:
        c = comps[i]
        props = c.get("props", {})
        if c["type"] == "state":
            out.append(None)
        elif c["type"] == "browserstate":
            out.append(cid)
        elif props.get("elem_id") in RUN_PICKERS:
            out.append(None if setup else run)
        elif c["type"] == "checkboxgroup" and props.get("value") == []:
            out.append([] if setup else [run])
        elif c["type"] == "api":
            out.append(None)
        else:
            out.append(props.get("value"))
    return out

API = {"start_run": ["{}", None], "stop_run": [run, None], "poll_metrics": [run, 0], "get_rollouts": [run, 0],
       "compare": [run, "This movie was", 2, 0], "list_runs": []}
lock = threading.Lock()
stats = {"answered": 0, "refused": 0, "errors": 0, "http_5xx": 0}

def call(http, name, cid, session, setup=False):
    dep = deps[name]
    data = API[name] if name in API else values(name, cid, setup)
    if name in ("start_run", "stop_run"):
        data = [d if d is not None else cid for d in data]
    # a select event carries the selection, as the page sends it (a row of the run on disk)
    selection = {"index": [0, 0], "value": run, "row_value": [run], "col_value": [run]}
    event_data = selection if dep.get("collects_event_data") else None
    body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": event_data, "trigger_id": None}
    if not dep.get("queue", True):
        r = http.post(url + "gradio_api/run/" + name, json=body)
        if r.status_code in (429, 404):  # refused by the admission middleware, before gradio
            return "refused"
        return "http_5xx" if r.status_code >= 500 else "answered" if r.status_code == 200 else "errors"
    r = http.post(url + "gradio_api/queue/join", json=body)
    if r.status_code in (429, 404):
        return "refused"
    if r.status_code >= 500:
        return "http_5xx"
    if r.status_code != 200:
        return "errors"
    event = r.json().get("event_id")
    with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                    return "answered" if msg.get("success") else "errors"
    return "errors"

def visitor(i):
    transport = httpx.HTTPTransport(local_address=f"127.0.0.{i + 2}")
    cid, session = f"flood-{i}", f"flood-{i}-{time.time_ns()}"
    with httpx.Client(timeout=60, transport=transport) as http:
        for setup in ("page_load", "runs_refresh", "compare_refresh", "refresh_runs"):  # the run pickers' choices
            try:
                call(http, setup, cid, session, setup=True)
            except httpx.HTTPError:
                pass
        print("ready", flush=True) if i == 0 else None
        go.wait()
        n = 0
        while time.time() < stop[0]:
            name = events[n % len(events)] if mode == "cycle" else events[0]
            try:
                kind = call(http, name, cid, session)
            except httpx.HTTPError:
                kind = "errors"
            with lock:
                stats[kind] += 1
            n += 1

go, stop = threading.Event(), [0.0]
threads = [threading.Thread(target=visitor, args=(i,)) for i in range(visitors)]
for t in threads:
    t.start()
sys.stdin.readline()  # the parent says go
stop[0] = time.time() + seconds
go.set()
for t in threads:
    t.join()
print(json.dumps(stats), flush=True)
"""


def flood(url: str, events: list[str], visitors: int, seconds: float, run: str, mode: str, nice: int) -> tuple:
    """``visitors`` clients sending ``events`` for ``seconds`` (``mode`` "flood": the first event only; "cycle":
    each in turn). ``(start, end, counts)``."""
    args = [sys.executable, "-c", FLOOD, url, json.dumps(events), str(visitors), str(seconds), run, mode]
    child = subprocess.Popen(["nice", "-n", str(nice), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline().strip()
    while line and line != "ready":
        line = child.stdout.readline().strip()
    time.sleep(1.0)  # the other visitors' set-up calls end
    start = time.time()
    child.stdin.write("go\n")
    child.stdin.flush()
    out = child.stdout.read()
    child.wait()
    return start, time.time(), json.loads(out.strip().splitlines()[-1])


def page_events(url: str) -> list[str]:
    import httpx

    config = httpx.get(url + "config", timeout=30).json()
    return [d["api_name"] for d in config["dependencies"] if d.get("api_name")]


def server_cpu(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def model_run(runs: Path) -> None:
    """One more finished run, with the embedded policy as its model: an export zips it, Compare loads it."""
    from rloo_demo.config import RunConfig
    from rloo_demo.models.hub import ASSETS_DIR
    from rloo_demo.store.folder import RunFolder

    run = RunFolder.create(RunConfig(output_dir=str(runs), run_name="with-model", max_steps=2))
    shutil.copytree(ASSETS_DIR / "tiny-imdb-gpt2", run.path / "model", ignore=shutil.ignore_patterns("README.md"))
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", step=2)


def serve(args, **env):
    runs, port, environ = space_app(
        **{
            "RLOO_KEEP_RUNS": "40",
            "RLOO_MAX_RUN_SECONDS": "3600",  # one run for every phase: the public budget (300 s) would end it first
            "RLOO_COMPUTE_SECONDS_PER_HOUR": "7200",
            "RLOO_ABANDON_SECONDS": "7200",
            "RLOO_MAX_STEPS": "20000",
        }
        | env
    )
    synth_runs(runs, 29)
    model_run(runs)
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=environ, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    wait_serving(url)
    return runs, url, proc


def bench_costs(args) -> dict:
    # what an answered event costs, not a refusal; a Start is refused by its settings (a step cap of 1), so that no
    # run trains while the events after it are measured
    runs, url, proc = serve(args, RLOO_EVENT_MS_PER_MINUTE="off", RLOO_MAX_STEPS="1")
    try:
        events = [e for e in args.events.split(",") if e] or page_events(url)
        # the server's own idle CPU (gradio's queue polling, the watchdog): taken off each event's share
        cpu, start = server_cpu(proc.pid), time.time()
        time.sleep(5.0)
        idle = (server_cpu(proc.pid) - cpu) / (time.time() - start)
        out = {"idle_cpu_share": round(idle, 4), "events": {}}

        def settle(limit=90.0):
            """Until the server is idle again (an Evaluate it answered may still be running): the time it ends."""
            deadline = time.time() + limit
            while time.time() < deadline:
                cpu, start = server_cpu(proc.pid), time.time()
                time.sleep(0.5)
                if (server_cpu(proc.pid) - cpu) / (time.time() - start) < 2 * idle + 0.02:
                    break
            return time.time()

        for event in events:
            settle()
            before, start = server_cpu(proc.pid), time.time()
            _, _, counts = flood(url, [event], 1, args.phase_seconds, "with-model", "flood", args.visitors_nice)
            end = settle()  # the work it left running counts as its own
            used = server_cpu(proc.pid) - before - idle * (end - start)
            calls = sum(counts.values())
            measured = round(1000 * used / max(1, calls), 2)
            # what the budget charges it: an event that costs more than it is charged lets 8 visitors slow the step
            # past the goal inside their budget (page_load, charged 8 for 22 ms, slowed it 14x)
            charged = EVENT_COSTS.get(event, DEFAULT_EVENT_COST)
            out["events"][event] = {"cpu_ms_per_call": measured, "charged_ms": charged, **counts}
            if measured > charged:
                out["events"][event]["under_charged"] = True
            print(event, out["events"][event], flush=True)
        return out
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(runs, ignore_errors=True)


def bench_floods(args) -> dict:
    runs, url, proc = serve(args)
    try:
        events = [e for e in args.events.split(",") if e] or page_events(url)
        run = post_api(url, "start_run", [json.dumps(RUN | {"max_steps": 20000}), "bench"])["run"]
        while len(step_times(runs / run, warmup=0)) < 5:
            time.sleep(0.5)

        def quiet():
            start = time.time()
            time.sleep(args.phase_seconds)
            return start, time.time()

        def slowdown(before, during, after):
            alone = steps_between(runs / run, *before) + steps_between(runs / run, *after)
            loaded = steps_between(runs / run, *during)
            if not alone or not loaded:
                return None, alone, loaded
            return statistics.median(loaded) / statistics.median(alone), alone, loaded

        results: dict = {}
        before = quiet()
        for _ in range(args.rounds):
            for event in events:
                cpu = server_cpu(proc.pid)
                *during, counts = flood(url, [event], args.visitors, args.phase_seconds, "with-model", "flood", 19)
                cpu = server_cpu(proc.pid) - cpu
                after = quiet()
                ratio, alone, loaded = slowdown(before, tuple(during), after)
                entry = results.setdefault(event, {"rounds": [], "counts": {}, "server_cpu_s": 0.0})
                if ratio is not None:
                    entry["rounds"].append(round(ratio, 3))
                for key, value in counts.items():
                    entry["counts"][key] = entry["counts"].get(key, 0) + value
                entry["server_cpu_s"] = round(entry["server_cpu_s"] + cpu, 2)
                entry["step_s_alone"] = round(statistics.median(alone), 4) if alone else None
                print(event, entry["rounds"][-1:] or "-", counts, flush=True)
                before = after
        for entry in results.values():
            entry["slowdown"] = round(statistics.fmean(entry["rounds"]), 3) if entry["rounds"] else None
        out = {"visitors": args.visitors, "phase_seconds": args.phase_seconds, "rounds": args.rounds}
        out["events"] = results
        worst = max((e["slowdown"] or 0, name) for name, e in results.items())
        out["worst"] = {"event": worst[1], "slowdown": worst[0]}
        if args.cycle_seconds:
            *during, counts = flood(url, events, 1, args.cycle_seconds, "with-model", "cycle", 19)
            after = quiet()
            ratio, _, _ = slowdown(before, tuple(during), after)
            out["cycle"] = {"slowdown": round(ratio, 3) if ratio else None, "counts": counts}
            print("cycle", out["cycle"], flush=True)
        post_api(url, "stop_run", [run, "bench"])
        wait_finished(url, run, 120)
        return out
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(runs, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="", help="comma-separated event names (default: every named event)")
    ap.add_argument("--visitors", type=int, default=8, help="visitors flooding each event, each its own address")
    ap.add_argument("--phase-seconds", type=float, default=8.0, help="length of each quiet and flood phase")
    ap.add_argument("--rounds", type=int, default=1, help="flood phases per event")
    ap.add_argument("--cycle-seconds", type=float, default=30.0, help="one visitor cycling all events (0: skip)")
    ap.add_argument("--costs", action="store_true", help="no run: each event's server CPU per call")
    ap.add_argument("--visitors-nice", type=int, default=19, help="the visitors' niceness")
    ap.add_argument("--json", default="", help="also write the results to this file")
    args = ap.parse_args()
    out = bench_costs(args) if args.costs else bench_floods(args)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
