"""Load test of a public Space: simulated visitors against one run, as the image runs the app.

    python scripts/bench_load.py                       # 10 visitors for 5 minutes (about 8 minutes in all)
    python scripts/bench_load.py --visitors 4 --minutes 1
    python scripts/bench_load.py --fairness both       # only: one visitor floods the queue; sessions churn

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
import shutil
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


def space_app(**env) -> tuple[Path, int, dict]:
    """A runs folder, a port and the environment of the app as the image runs it: public mode, runs outside the
    working folder and /tmp. ``env`` adds or overrides variables."""
    home = Path.home() / ".rloo-demo-bench"
    home.mkdir(exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=home))
    port = free_port()
    base = dict(os.environ, RLOO_PUBLIC="1", RLOO_RUNS_DIR=str(runs), GRADIO_SERVER_NAME="127.0.0.1")
    return runs, port, base | {"GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1"} | env


def wait_serving(url: str, timeout: float = 120.0) -> None:
    """Until the app answers its page (it loads its models first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.5)


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
    ap.add_argument("--readers", type=int, default=0, help="the 8-readers scenario: this many clients per endpoint")
    ap.add_argument("--endpoints", default="", help="with --readers: comma-separated, of " + ", ".join(READ_ENDPOINTS))
    ap.add_argument("--phase-seconds", type=float, default=12.0, help="with --readers: length of each phase")
    ap.add_argument("--rounds", type=int, default=3, help="with --readers: quiet/reading pairs per endpoint")
    ap.add_argument("--server-nice", type=int, default=0, help="with --readers: the server's niceness (<0: root)")
    ap.add_argument("--readers-nice", type=int, default=19, help="with --readers: the readers' niceness")
    ap.add_argument("--runs-on-disk", type=int, default=30, help="with --readers: finished runs in the runs folder")
    ap.add_argument("--fresh-sessions", action="store_true", help="with --readers: a new session for each API read")
    ap.add_argument(
        "--fairness",
        choices=("flood", "churn", "both"),
        help="only the fair-share scenarios: one visitor flooding the queue, and browser sessions churning",
    )
    ap.add_argument("--flood-seconds", type=float, default=60.0, help="with --fairness flood: its length")
    ap.add_argument("--sessions", type=int, default=3000, help="with --fairness churn: new sessions made")
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="with --fairness churn: RLOO_SESSION_SECONDS")
    args = ap.parse_args()
    if args.readers:
        return bench_readers(args)
    if args.fairness:
        return bench_fairness(args)

    # the visitors' X-Forwarded-For stands for a Space's proxy: the proxy is this machine's own address
    runs, port, env = space_app(RLOO_TRUSTED_PROXIES="127.0.0.1/32")
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    out: dict = {"visitors": args.visitors, "load_seconds": args.minutes * 60}
    try:
        wait_serving(url)
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


# ----------------------------------------------------------------------------- 8 readers beside a run (issue 25)

READ_ENDPOINTS = ("list_runs", "get_rollouts", "poll_metrics", "page_tick")

READERS = r"""
import json, random, sys, threading, time, uuid
import httpx
url, endpoint, readers, seconds, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
fresh = sys.argv[6] == "1"  # a new session for every API read too (page ticks always have one)
config = httpx.get(url + "config", timeout=30).json()
deps = {d["api_name"]: d for d in config["dependencies"]}
dep = deps[endpoint]
lock = threading.Lock()
stats = {"answers": 0, "refused": 0, "errors": 0, "http_5xx": 0, "seconds": []}
args = {"list_runs": [], "get_rollouts": [run, 0], "poll_metrics": [run, 0]}
print("ready", flush=True)
sys.stdin.readline()  # the parent says go
stop = time.time() + seconds

def body(data, session):
    data = list(data) + [None] * (len(dep["inputs"]) - len(data))
    return {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}

def once(http, i, n):
    if endpoint == "page_tick":  # a fresh session each time, and the smoothing cycled: each one a new figure key
        data = [f"reader-{i}", None, -1, round((n % 20) * 0.05, 2), -1, True, None, "train"]
        r = http.post(url + "gradio_api/run/page_tick", json=body(data, uuid.uuid4().hex))
        if r.status_code >= 500:
            return "http_5xx"
        if r.status_code == 429:  # refused by the admission middleware, before gradio
            return "refused"
        out = r.json().get("data") or []
        text = json.dumps(out)
        return "refused" if "too many reads" in text else "answers"
    session = f"reader-{i}" if not fresh else uuid.uuid4().hex  # one session per client, as gradio_client has
    r = http.post(url + "gradio_api/queue/join", json=body(args[endpoint], session))
    if r.status_code >= 500:
        return "http_5xx"
    if r.status_code == 429:  # refused by the admission middleware, before gradio
        return "refused"
    if r.status_code != 200:
        return "errors"
    with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    out = (msg.get("output") or {}).get("data") or [None]
                    if not msg.get("success"):
                        return "errors"
                    if isinstance(out[0], dict) and "too many reads" in str(out[0].get("error")):
                        return "refused"
                    return "answers"
    return "errors"

def reader(i):
    # each reader is its own visitor: its own loopback address (127.0.0.2, 127.0.0.3, ...)
    transport = httpx.HTTPTransport(local_address=f"127.0.0.{i + 2}")
    with httpx.Client(timeout=60, transport=transport) as http:
        n = 0
        while time.time() < stop:
            t = time.time()
            try:
                kind = once(http, i, n)
            except httpx.HTTPError:
                kind = "errors"
            with lock:
                stats[kind] += 1
                stats["seconds"].append(time.time() - t)
            n += 1

threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
secs = sorted(stats.pop("seconds")) or [0.0]
stats["call_s_median"] = round(secs[len(secs) // 2], 4)
print(json.dumps(stats), flush=True)
"""


def synth_runs(runs: Path, count: int, steps: int = 150) -> None:
    """``count`` finished runs on disk, as a Space keeps them (30 at most): config, status, ``steps`` metrics lines
    of the size a real run writes, a few steps of rollouts. Written before the server starts."""
    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder

    record = {"max_steps": steps, "time": 0.0, "logged_at": 0.0, "loss": 0.0, "grad_norm": 60.0, "kl": 0.01}
    record |= {f"extra/{k}": 0.123456789 for k in range(30)}  # a real line has about 40 keys (1.1 kB)
    group = {"step": 1, "group": 0, "prompt": "This movie was", "k": 4, "completions": [{"text": "good " * 20}] * 4}
    for i in range(count):
        run = RunFolder.create(RunConfig(output_dir=str(runs), run_name=f"synthetic-{i:02d}", max_steps=steps))
        lines = [json.dumps(record | {"step": s, "reward": 0.01 * s, "step_time": 0.6}) for s in range(1, steps + 1)]
        (run.path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        rollouts = [json.dumps(group | {"step": s}) for s in range(1, 6)]
        (run.path / "rollouts.jsonl").write_text("\n".join(rollouts) + "\n")
        run.set_status("finished", step=steps, created=time.time() - 3600 + i, finished=time.time())


def readers_phase(
    url: str, endpoint: str, readers: int, seconds: float, run: str, fresh: bool = False, nice: int = 19
) -> tuple[float, float, dict]:
    """``readers`` clients looping on ``endpoint`` for ``seconds``; ``(start, end, their counts)``."""
    command = [sys.executable, "-c", READERS, url, endpoint, str(readers), str(seconds), run, "1" if fresh else "0"]
    child = subprocess.Popen(
        ["nice", "-n", str(nice), *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    start = time.time()
    child.stdin.write("go\n")
    child.stdin.flush()
    out = child.stdout.read()
    child.wait()
    return start, time.time(), json.loads(out.strip().splitlines()[-1])


def steps_between(run_dir: Path, start: float, end: float, settle: float = 2.0) -> list[float]:
    """Step times of the steps logged between ``start + settle`` and ``end`` (wall clock)."""
    text = (run_dir / "metrics.jsonl").read_text()
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]  # a line being written waits
    rows = [json.loads(line) for line in lines if line.strip()]
    return [r["step_time"] for r in rows if start + settle <= r.get("logged_at", 0) <= end and "step_time" in r]


def bench_readers(args) -> int:
    """The "8 readers beside a run" scenario: one run trains; for each read endpoint, ``--rounds`` times, a quiet
    phase (nobody reads) then a reading phase (``--readers`` clients, each its own loopback address, looping on the
    endpoint as fast as it answers). A round's slowdown is the median step of its reading phase over the median
    step of the quiet phases before and after it; the endpoint's is the mean over rounds (short alternating phases:
    a shared machine's own load drifts over minutes). Target (issue 25): at most 1.3x per endpoint."""
    endpoints = [e for e in args.endpoints.split(",") if e] if args.endpoints else list(READ_ENDPOINTS)
    runs, port, env = space_app(
        RLOO_KEEP_RUNS=str(args.runs_on_disk + 5),  # the synthetic runs stay while the bench runs
        RLOO_MAX_RUN_SECONDS="3600",  # one run for every phase: the public budget (300 s) would end it first
        RLOO_COMPUTE_SECONDS_PER_HOUR="3600",
        RLOO_ABANDON_SECONDS="3600",
        RLOO_MAX_STEPS="5000",
    )
    synth_runs(runs, args.runs_on_disk)
    url = f"http://127.0.0.1:{port}/"
    # --server-nice below 0 (root) keeps a shared machine's other jobs from taking the server's cores
    server = (
        ["nice", "-n", str(args.server_nice), sys.executable, "app.py"]
        if args.server_nice
        else [sys.executable, "app.py"]
    )
    proc = subprocess.Popen(server, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    out: dict = {"readers": args.readers, "phase_seconds": args.phase_seconds, "rounds": args.rounds}
    out["runs_on_disk"], out["fresh_sessions"] = args.runs_on_disk, args.fresh_sessions
    try:
        wait_serving(url)
        run = post_api(url, "start_run", [json.dumps(RUN | {"max_steps": 5000}), "bench"])["run"]
        while len(step_times(runs / run, warmup=0)) < 5:
            time.sleep(0.5)

        def quiet() -> tuple[float, float]:
            start = time.time()
            time.sleep(args.phase_seconds)
            return start, time.time()

        phases = {e: [] for e in endpoints}  # endpoint -> [(quiet before, reading, quiet after, counts)]
        for _ in range(args.rounds):
            for endpoint in endpoints:
                before = quiet()
                *reading, counts = readers_phase(
                    url, endpoint, args.readers, args.phase_seconds, run, args.fresh_sessions, args.readers_nice
                )
                phases[endpoint].append((before, tuple(reading), counts))
        last = quiet()
        post_api(url, "stop_run", [run, "bench"])
        wait_finished(url, run, 120)
        results = {}
        for endpoint, rounds in phases.items():
            ratios, alone_all, loaded_all, counts = [], [], [], {}
            for k, (before, reading, got) in enumerate(rounds):
                nxt = phases[endpoints[(endpoints.index(endpoint) + 1) % len(endpoints)]]
                after = nxt[k + (endpoint == endpoints[-1])][0] if k + (endpoint == endpoints[-1]) < len(nxt) else last
                alone = steps_between(runs / run, *before) + steps_between(runs / run, *after)
                loaded = steps_between(runs / run, *reading)
                if alone and loaded:
                    ratios.append(statistics.median(loaded) / statistics.median(alone))
                    alone_all += alone
                    loaded_all += loaded
                for key, value in got.items():
                    counts[key] = counts.get(key, 0) + value if key != "call_s_median" else value
            results[endpoint] = {
                "step_s_alone": round(statistics.median(alone_all), 4),
                "step_s_with_readers": round(statistics.median(loaded_all), 4),
                "slowdown": round(statistics.fmean(ratios), 3),
                "slowdown_per_round": [round(r, 3) for r in ratios],
                "steps": [len(alone_all), len(loaded_all)],
                "reads": counts,
            }
        out["endpoints"] = results
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(runs, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


# ----------------------------------------------------------------------------- a fair share (issue 25: admission)

SERVE = r"""
import os, sys, time
from pathlib import Path
from rloo_demo.public.limits import Limits
from rloo_demo.public.malloc import bound_arenas
from rloo_demo.server.runner import Runner
from rloo_demo.ui import app as ui_app
from rloo_demo.ui.controller import Controller
bound_arenas()
limits = Limits.from_env()
controller = Controller(Runner(runs_dir=os.environ["RLOO_RUNS_DIR"], limits=limits))
demo = ui_app.prepare(ui_app.build_app(controller), limits)
demo.launch(prevent_thread_lock=True, quiet=True, **ui_app.launch_options(limits))
probe = Path(sys.argv[1])
while True:  # gradio's count of browser sessions, for the bench to read
    probe.write_text(str(len(demo.server_app.state_holder.session_data)))
    time.sleep(0.25)
"""


class Served:
    """The app as the image runs it (public mode, runs outside the working folder), started like ``app.py`` by
    ``SERVE``, which also writes gradio's session count to a file every 0.25 s."""

    def __init__(self, **env):
        self.runs, port, env = space_app(**env)
        self.probe = self.runs.parent / f"{self.runs.name}.sessions"
        self.url = f"http://127.0.0.1:{port}/"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(self.probe)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 120
        while not self.probe.exists():
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the app did not start")
            time.sleep(0.25)
        import httpx

        config = httpx.get(self.url + "config", timeout=30).json()
        self.deps = {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}

    def sessions(self) -> int:
        return int(self.probe.read_text() or 0)

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def body(self, name: str, data: list, session: str) -> dict:
        dep = self.deps[name]
        data = list(data) + [None] * (len(dep["inputs"]) - len(data))
        return {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}

    def call(self, http, name: str, data: list, session: str, timeout: float = 60.0) -> int:
        """One event, as the page sends it (a plain request for an unqueued one, else join + stream); the HTTP
        status of the request that asks (join or plain call), after the answer came."""
        if not self.deps[name].get("queue", True):
            return http.post(self.url + "gradio_api/run/predict", json=self.body(name, data, session)).status_code
        joined = http.post(self.url + "gradio_api/queue/join", json=self.body(name, data, session))
        if joined.status_code != 200:
            return joined.status_code
        event, deadline = joined.json()["event_id"], time.time() + timeout
        with http.stream("GET", self.url + "gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                        return 200
                if time.time() > deadline:
                    break
        return 0  # no answer in time

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.runs, ignore_errors=True)
        self.probe.unlink(missing_ok=True)


def _client(address: str):
    import httpx

    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=120)


def _percentile(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[int(q * (len(values) - 1))], 3) if values else None


def queue_flood(seconds: float = 60.0, flooders: int = 4) -> dict:
    """Visitor A (127.0.0.2, ``flooders`` threads) re-joins /compare as fast as it can, on a run that does not exist
    (each event is refused in about a millisecond, the audit's case), and never reads its answers; visitor B
    (127.0.0.3) meanwhile loads its page, asks for a Start (a config the limits refuse: nothing trains) and a
    Compare, twice a second. Counted: A's join answers by status, B's answers by status and their latency, and
    the server's RSS and session count."""
    import threading
    from collections import Counter

    served = Served()
    try:
        stop = time.time() + seconds
        a_codes, lock = Counter(), threading.Lock()
        b_codes = {name: Counter() for name in ("page_load", "start_run", "compare")}
        b_seconds = {name: [] for name in b_codes}
        rss_before = served.rss_mb()

        def flood(i):
            with _client("127.0.0.2") as http:
                body = served.body("compare", ["no-such-run", "This movie was", 1, 0], f"flood-{i}")
                while time.time() < stop:
                    code = http.post(served.url + "gradio_api/queue/join", json=body).status_code
                    with lock:
                        a_codes[code] += 1

        def page():
            with _client("127.0.0.3") as http:
                n = 0
                while time.time() < stop:
                    t = time.time()
                    for name, data in (
                        ("page_load", ["b-client"]),
                        ("start_run", [json.dumps({"max_steps": 0}), "b-client"]),
                        ("compare", ["no-such-run", "This movie was", 1, 0]),
                    ):
                        began = time.time()
                        b_codes[name][served.call(http, name, data, f"b-{n}")] += 1
                        b_seconds[name].append(time.time() - began)
                    n += 1
                    time.sleep(max(0.0, 0.5 - (time.time() - t)))

        threads = [threading.Thread(target=flood, args=(i,)) for i in range(flooders)]
        threads.append(threading.Thread(target=page))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {
            "seconds": seconds,
            "a_joins": sum(a_codes.values()),
            "a_by_status": dict(sorted(a_codes.items())),
            "a_admitted_per_s": round(a_codes[200] / seconds, 1),
            "b": {
                name: {
                    "calls": sum(codes.values()),
                    "by_status": dict(codes),
                    "turned_away": sum(v for k, v in codes.items() if k != 200),
                    "s_median": _percentile(b_seconds[name], 0.5),
                    "s_p95": _percentile(b_seconds[name], 0.95),
                }
                for name, codes in b_codes.items()
            },
            "rss_growth_mb": round(served.rss_mb() - rss_before, 1),
            "sessions_after": served.sessions(),
        }
    finally:
        served.close()


def session_churn(sessions: int = 3000, idle_seconds: float = 20.0, clients: int = 4) -> dict:
    """``sessions`` new browser sessions, from ``clients`` addresses (127.0.0.2, ...): each loads the page and
    ticks once, as a page opened and closed does. The server's RSS and gradio's session count are sampled every
    500 sessions; then, with ``RLOO_SESSION_SECONDS=idle_seconds``, how long until the idle ones are gone."""
    import threading
    import uuid

    served = Served(RLOO_SESSION_SECONDS=str(idle_seconds))
    try:
        made, lock, samples, codes = [0], threading.Lock(), [], {}
        rss_before, sessions_before = served.rss_mb(), served.sessions()
        tick = ["cid", None, -1, 0.6, -1, True, None, "train"]

        def churn(i):
            with _client(f"127.0.0.{i + 2}") as http:
                while True:
                    with lock:
                        if made[0] >= sessions:
                            return
                        made[0] += 1
                        n = made[0]
                    session = uuid.uuid4().hex
                    for name, data in (("page_load", [f"churn-{n}"]), ("page_tick", tick)):
                        code = served.call(http, name, data, session)
                        with lock:
                            codes[code] = codes.get(code, 0) + 1
                    if n % 500 == 0:
                        samples.append(
                            {
                                "sessions_made": n,
                                "sessions_kept": served.sessions(),
                                "rss_mb": round(served.rss_mb(), 1),
                            }
                        )

        start = time.time()
        threads = [threading.Thread(target=churn, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        made_s = time.time() - start
        time.sleep(0.6)  # two probe writes
        peak = served.sessions()
        rss_after = served.rss_mb()
        # wait for the idle ones to go, if that is to be seen within a few minutes
        deadline = time.time() + (4 * idle_seconds + 60 if idle_seconds <= 120 else 0)
        while served.sessions() > 0 and time.time() < deadline:
            time.sleep(0.5)
        return {
            "sessions_made": sessions,
            "seconds": round(made_s, 1),
            "status_codes": codes,
            "samples": sorted(samples, key=lambda r: r["sessions_made"]),
            "sessions_kept_after_churn": peak,
            "rss_before_mb": round(rss_before, 1),
            "rss_after_churn_mb": round(rss_after, 1),
            "rss_growth_mb": round(rss_after - rss_before, 1),
            "rss_per_session_kb": round((rss_after - rss_before) * 1024 / max(1, peak - sessions_before), 1),
            "idle_seconds": idle_seconds,
            "sessions_left_when_idle": served.sessions(),
            "seconds_until_idle_ones_gone": round(time.time() - start - made_s, 1),
            "rss_after_idle_mb": round(served.rss_mb(), 1),
        }
    finally:
        served.close()


def bench_fairness(args) -> int:
    out = {}
    if args.fairness in ("flood", "both"):
        out["queue_flood"] = queue_flood(args.flood_seconds)
    if args.fairness in ("churn", "both"):
        out["session_churn"] = session_churn(args.sessions, args.idle_seconds)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
