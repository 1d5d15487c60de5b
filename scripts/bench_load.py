"""Load test of a public Space: simulated visitors against one run, as the image runs the app.

    python scripts/bench_load.py                       # 10 visitors for 5 minutes (about 8 minutes in all)
    python scripts/bench_load.py --visitors 4 --minutes 1

The app starts as ``python app.py`` with ``RLOO_PUBLIC=1`` and its runs folder outside the working folder and /tmp.
First one run trains with no visitors (the baseline step time). Then the same run trains under load for
``--minutes`` (the public compute budget stops it at 300 s): each visitor ticks its page once a second (the page's
own tick event), and from time to time asks for a Compare, an Evaluate and a Start, as a curious visitor would.
The visitors run niced in a child process, so their own CPU does not count against the server.

Reported: the training slowdown (mean step time under load / without visitors), tick latency (mean, p95, max),
the server's RSS growth over the load phase (from when the loaded run trains; also its peak and the growth in
the phase's second half, which tells a leak from memory loaded once), and the count of HTTP 5xx answers and of
refusals by kind. Targets (issue 8): slowdown <= 1.5x, p95 tick <= 1.5 s, RSS growth <= 200 MB, no 5xx.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from apputil import free_port  # noqa: E402

RUN = {"max_steps": 500, "prompts_per_step": 4, "num_generations": 4, "max_new_tokens": 24}

VISITORS = r"""
import json, os, random, statistics, sys, threading, time
import httpx
url, visitors, seconds, run = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
ticks_only = sys.argv[5] == "1"  # visitors that only watch: tells the cost of watching from that of sampling
config = httpx.get(url + "config", timeout=30).json()
fn = {d["api_name"]: d["id"] for d in config["dependencies"]}
# Inputs left out are sent as null, as a browser sends an unset state (the page's locale then reads as English).
width = {d["api_name"]: len(d["inputs"]) for d in config["dependencies"]}
pad = lambda name, data: list(data) + [None] * (width[name] - len(data))
stop = time.time() + seconds
lock = threading.Lock()
stats = {"ticks": [], "http_5xx": 0, "errors": {}, "calls": {}}

def note(kind, key):
    with lock:
        stats[kind][key] = stats[kind].get(key, 0) + 1

def call(http, name, data, session):
    body = {"data": pad(name, data), "fn_index": fn[name], "session_hash": session, "event_data": None,
            "trigger_id": None}
    note("calls", name)
    r = http.post(url + "gradio_api/queue/join", json=body)
    if r.status_code >= 500:
        with lock:
            stats["http_5xx"] += 1
        return None
    with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as s:
        if s.status_code >= 500:
            with lock:
                stats["http_5xx"] += 1
            return None
        for line in s.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    out = msg.get("output") or {}
                    if not msg.get("success"):
                        note("errors", name + ": " + str(out.get("error"))[:60])
                    return out.get("data")

def visitor(i):
    rnd = random.Random(i)
    session = f"visitor-{i}"
    cid = f"visitor-client-{i}"
    # each visitor comes from its own address, as behind a Space's proxy (the last X-Forwarded-For hop)
    with httpx.Client(timeout=120, headers={"X-Forwarded-For": f"10.0.0.{i + 1}"}) as http:
        call(http, "page_load", [cid], session)
        next_compare = time.time() + rnd.uniform(5, 30)
        next_eval = time.time() + rnd.uniform(30, 120)
        next_start = time.time() + rnd.uniform(10, 90)
        while time.time() < stop:
            t = time.time()
            data = pad("page_tick", [cid, None, -1, 0.6, -1, True, None, "train"])
            body = {"data": data, "fn_index": fn["page_tick"], "session_hash": session, "event_data": None,
                    "trigger_id": None}
            r = http.post(url + "gradio_api/run/page_tick", json=body)
            with lock:
                stats["ticks"].append(time.time() - t)
                if r.status_code >= 500:
                    stats["http_5xx"] += 1
            if t > next_compare and not ticks_only:
                call(http, "compare_refresh", [None, None], session)
                args = [cid, run, "This movie was", 4, 24, 1.0, 1.0, rnd.randrange(100)]
                out = call(http, "compare_sample", args, session)
                if out and isinstance(out[0], str) and out[0].startswith("**Error:**"):
                    note("errors", "compare: " + out[0][10:70])
                next_compare = time.time() + rnd.uniform(20, 40)
            if t > next_eval and not ticks_only:
                call(http, "compare_refresh", [None, None], session)
                out = call(http, "compare_evaluate", [cid, run, 8, 0], session)
                if out and isinstance(out[0], str) and out[0].startswith("**Error:**"):
                    note("errors", "evaluate: " + out[0][10:70])
                next_eval = time.time() + rnd.uniform(60, 120)
            if t > next_start and not ticks_only:
                out = call(http, "start_run", ["{}", cid], session)
                if out and isinstance(out[0], dict) and "error" in out[0]:
                    note("errors", "start: " + out[0]["error"][:60])
                next_start = time.time() + rnd.uniform(60, 120)
            time.sleep(max(0.0, 1.0 - (time.time() - t)))

def owner():
    # the starter's own client polls its run, as an API script does, so the abandon watchdog leaves it alone
    from gradio_client import Client
    c = Client(url, verbose=False)
    while time.time() < stop:
        c.predict(run, 0, api_name="/poll_metrics")
        time.sleep(10)

threads = [threading.Thread(target=visitor, args=(i,)) for i in range(visitors)]
threads.append(threading.Thread(target=owner))
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(stats))
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def step_times(run_dir: Path, warmup: int = 3) -> list[float]:
    """Step times of a run, the first ``warmup`` steps left out."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]  # a line being written waits
    rows = [json.loads(line) for line in lines if line.strip()]
    return [r["step_time"] for r in rows[warmup:]]


def post_api(url: str, name: str, data: list):
    from gradio_client import Client

    return Client(url, verbose=False).predict(*data, api_name=f"/{name}")


def wait_finished(url: str, run: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if post_api(url, "poll_metrics", [run, 10**9])["status"] != "running":
            return
        time.sleep(2)
    raise TimeoutError(run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--visitors", type=int, default=10, help="simulated visitors")
    ap.add_argument("--minutes", type=float, default=5.0, help="length of the load phase")
    ap.add_argument("--baseline-steps", type=int, default=120, help="steps of the run without visitors")
    ap.add_argument("--ticks-only", action="store_true", help="visitors only watch (no Compare, Evaluate, Start)")
    args = ap.parse_args()

    home = Path.home() / ".rloo-demo-bench"  # the Space layout: outside the working folder and /tmp
    home.mkdir(exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=home))
    port = free_port()
    env = dict(
        os.environ,
        RLOO_PUBLIC="1",
        RLOO_RUNS_DIR=str(runs),
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        HF_HUB_OFFLINE="1",
        RLOO_TRUST_FORWARDED="1",  # the visitors' X-Forwarded-For stands for a Space's proxy
    )
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    out: dict = {"visitors": args.visitors, "load_seconds": args.minutes * 60}
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(url, timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        # 1. baseline: the run alone
        base = post_api(url, "start_run", [json.dumps(RUN | {"max_steps": args.baseline_steps}), "bench"])["run"]
        wait_finished(url, base, 900)
        baseline = statistics.fmean(step_times(runs / base))
        # 2. the same run under load, until the budget (or --minutes) ends it
        loaded = post_api(url, "start_run", [json.dumps(RUN), "bench"])["run"]
        # RSS before the load is taken once the run trains (its models, optimiser and first steps allocated), so
        # that the growth is the visitors' cost, not the run's own memory
        deadline = time.time() + 120
        while time.time() < deadline and len(step_times(runs / loaded, warmup=0)) < 3:
            time.sleep(0.5)
        rss_before = rss_mb(proc.pid)
        visitors = subprocess.Popen(
            [
                "nice",
                "-n",
                "19",
                sys.executable,
                "-c",
                VISITORS,
                url,
                str(args.visitors),
                str(args.minutes * 60),
                loaded,
                "1" if args.ticks_only else "0",
            ],
            stdout=(visitors_out := tempfile.TemporaryFile("w+")),  # a pipe could fill and stall them
        )
        # RSS every few seconds: growth that levels off (first models and imports loaded) is not a leak
        rss = [(0.0, rss_before)]
        start = time.time()
        while visitors.poll() is None:
            time.sleep(5)
            rss.append((time.time() - start, rss_mb(proc.pid)))
        if visitors.returncode != 0:
            raise RuntimeError(f"the visitors failed with status {visitors.returncode}")
        visitors_out.seek(0)
        rss_after = rss_mb(proc.pid)
        half = [mb for t, mb in rss if t >= args.minutes * 30]
        stats = json.loads(visitors_out.read().strip().splitlines()[-1])
        post_api(url, "stop_run", [loaded, "bench"])
        wait_finished(url, loaded, 120)
        loaded_times = step_times(runs / loaded)
        ticks = sorted(stats["ticks"])
        out.update(
            baseline_step_s=round(baseline, 4),
            loaded_step_s=round(statistics.fmean(loaded_times), 4),
            loaded_steps=len(loaded_times) + 3,
            slowdown=round(statistics.fmean(loaded_times) / baseline, 3),
            ticks=len(ticks),
            tick_s_mean=round(statistics.fmean(ticks), 3),
            tick_s_p95=round(ticks[int(0.95 * (len(ticks) - 1))], 3),
            tick_s_max=round(ticks[-1], 3),
            rss_before_mb=round(rss_before, 1),
            rss_after_mb=round(rss_after, 1),
            rss_growth_mb=round(rss_after - rss_before, 1),
            rss_peak_mb=round(max(mb for _, mb in rss), 1),
            rss_growth_second_half_mb=round(rss_after - half[0], 1) if half else None,
            http_5xx=stats["http_5xx"],
            calls=stats["calls"],
            refusals=stats["errors"],
            loaded_run_status=json.loads((runs / loaded / "status.json").read_text()).get("reason"),
        )
    finally:
        proc.terminate()
        proc.wait(30)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
