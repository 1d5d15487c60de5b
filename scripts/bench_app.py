"""Benchmark the web app (issue 4's performance targets) on this machine.

    python scripts/bench_app.py [--steps 60]

1. Cold start: ``python app.py`` until the page answers HTTP 200 (target <= 15 s).
2. Step time: the same config trained bare through the engine (``python -m rloo_demo train``) and under the app
   with a browser page watching it live; ratio of mean step times (target <= 1.05).
3. Latency: from a step being logged (its ``logged_at`` wall time) to the reward plot in the page having that
   point, read by headless Chromium every 50 ms (target <= 1.5 s). Needs /usr/bin/chromium; skipped otherwise.
4. Peak resident memory of the app process during the run (target <= 2 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
POINTS = """() => { const el = document.querySelector('#reward-plot .js-plotly-plot');
  if (!el || !el.data) return 0; const t = el.data.find(t => t.name === 'total reward');
  return t && t.x ? t.x.length : 0; }"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if urllib.request.urlopen(url, timeout=1).status == 200:
                return time.time() - t0
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(url)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def mean_step_time(run_dir: Path) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return statistics.fmean(r["step_time"] for r in rows[2:])  # skip warm-up steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="steps of each measured run")
    args = ap.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    work = Path(tempfile.mkdtemp(prefix="rloo-bench-"))
    out: dict = {}

    # bare engine
    bare_dir = work / "bare"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rloo_demo",
            "train",
            "--max-steps",
            str(args.steps),
            "--output-dir",
            str(bare_dir),
            "--run-name",
            "bare",
        ],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
    )
    out["bare_mean_step_s"] = round(mean_step_time(bare_dir / "bare"), 4)

    # the app
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    app_env = dict(env, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", RLOO_RUNS_DIR=str(work / "app"))
    proc = subprocess.Popen(
        [sys.executable, "app.py"], env=app_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        out["cold_start_s"] = round(wait_http(url), 2)
        from gradio_client import Client

        latencies = []
        if os.path.exists(CHROMIUM):
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page()
                page.goto(url)
                page.wait_for_selector("#start-btn")
                client = Client(url, verbose=False)
                started = client.predict(json.dumps({"max_steps": args.steps}), "bench", api_name="/start_run")
                run = started["run"]
                seen, first_seen = 0, {}
                deadline = time.time() + 600
                while time.time() < deadline:
                    n = page.evaluate(POINTS)
                    now = time.time()
                    for step in range(seen + 1, n + 1):
                        first_seen[step] = now
                    seen = max(seen, n)
                    if (
                        client.predict(run, 10**9, api_name="/poll_metrics")["status"] != "running"
                        and seen >= args.steps
                    ):
                        break
                    time.sleep(0.05)
                browser.close()
            records = [json.loads(x) for x in (work / "app" / run / "metrics.jsonl").read_text().splitlines()]
            latencies = [first_seen[r["step"]] - r["logged_at"] for r in records if r["step"] in first_seen]
        else:
            client = Client(url, verbose=False)
            run = client.predict(json.dumps({"max_steps": args.steps}), "bench", api_name="/start_run")["run"]
            while client.predict(run, 10**9, api_name="/poll_metrics")["status"] == "running":
                time.sleep(0.5)
        out["app_mean_step_s"] = round(mean_step_time(work / "app" / run), 4)
        out["step_time_ratio_app_over_bare"] = round(out["app_mean_step_s"] / out["bare_mean_step_s"], 3)
        if latencies:
            out["page_latency_s_mean"] = round(statistics.fmean(latencies), 3)
            out["page_latency_s_max"] = round(max(latencies), 3)
            out["page_latency_s_p95"] = round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 3)
        out["app_peak_rss_mb"] = round(peak_rss_mb(proc.pid), 1)
    finally:
        proc.terminate()
        proc.wait(30)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
