"""The Train tab's input and alerts in a real browser, at 1440x900 and 390x844: a K
past this server's limit is refused by its label with the limit named and stays as typed (a slider's box made it
the largest allowed without a word); a collapsed run shows its warning as a coloured callout with the step it fired
at, a marker on the reward plot and the end-of-run summary; Start is disabled while the page's own run trains and
enabled again when it ends, and the first seconds of that run say what it is doing.

``python -m pytest tests/browser/test_browser_train.py`` (about two minutes; needs /usr/bin/chromium).
"""

import json
import os
import re

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app, wait_until
from conftest import ARTIFACTS

from rloo_demo.config import RunConfig
from rloo_demo.public.limits import LOCAL
from rloo_demo.store.folder import RunFolder

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
BOX_JS = """(sel) => { const e = document.querySelector(sel); if (!e) return null; const r = e.getBoundingClientRect();
  const s = getComputedStyle(e); return {top: r.top, bottom: r.bottom, height: r.height, width: r.width,
  border: s.borderLeftColor, background: s.backgroundColor, vh: window.innerHeight}; }"""
MARKS_JS = """() => { const el = document.querySelector('#reward-plot .js-plotly-plot');
  return el && el.layout && el.layout.shapes ? el.layout.shapes.map(s => s.x0) : []; }"""


def collapsed_run(root) -> None:
    """A finished run whose completions collapsed from step 21 on (the judges' thresholds crossed at step 24)."""
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name="collapsed", max_steps=30))
    with open(run.path / "metrics.jsonl", "w", encoding="utf-8") as f:
        for step in range(1, 31):
            bad = step >= 21
            record = {"step": step, "max_steps": 30, "reward": 0.02 * step, "kl": 0.05 * step, "time": step}
            record |= {"judges/distinct_2": 0.1 if bad else 0.9, "judges/repetition": 0.8 if bad else 0.05}
            f.write(json.dumps(record) + "\n")
    run.set_status("finished", step=30)


@pytest.mark.slow
def test_refusals_the_callout_and_start_during_ones_own_run(tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    collapsed_run(tmp_path)
    with running_app(tmp_path, limits=LOCAL) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        pages = {}
        for name, (width, height) in VIEWPORTS.items():
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url)
            page.wait_for_selector("#start-btn", timeout=60_000)
            # the collapsed run is the page's run: its warning is a callout, not bold text in the status line (on a
            # phone the bar is folded to one line, its button marked ⚠: a tap opens it)
            if name == "phone":
                page.locator("#train-alerts .rloo-callout").wait_for(state="attached", timeout=60_000)
                page.click(".rloo-bar-toggle")
            callout = page.locator("#train-alerts .rloo-callout")
            callout.wait_for(timeout=60_000)
            box = page.evaluate(BOX_JS, "#train-alerts .rloo-callout")
            assert box["height"] > 20 and box["border"] == "rgb(232, 163, 61)", box
            assert box["top"] >= 0 and box["bottom"] <= box["vh"], f"{name}: the callout is off the first screen"
            assert "Collapse" in callout.inner_text() and "from step 24" in callout.inner_text()
            wait_until(lambda page=page: page.evaluate(MARKS_JS) == [24], timeout=30)  # the marker on the plot
            summary = page.inner_text("#run-summary")
            assert "Run summary" in summary and "+0.060 → +0.560" in summary, summary  # steps 1-5 and 26-30
            page.screenshot(path=str(ARTIFACTS / f"train-callout-{name}.png"))

            # K past the limit (64): refused by its label with the limit named, and kept as typed
            k = page.locator("#k-input input")
            k.fill("1000")
            k.press("Tab")
            page.click("#start-btn")
            # the estimate refuses it first, in the same box; Start's refusal replaces that one
            wait_until(lambda page=page: "Not started" in page.inner_text("#form-error"), timeout=30)
            message = page.inner_text("#form-error")
            assert "Not started" in message and "K completions per prompt" in message and "64" in message
            assert k.input_value() == "1000", "the value was changed behind the user's back"
            box = page.evaluate(BOX_JS, "#form-error")
            assert box["top"] >= 0 and box["bottom"] <= box["vh"], f"{name}: the refusal is off the first screen"
            page.screenshot(path=str(ARTIFACTS / f"train-refusal-{name}.png"))
            k.fill("4")
            k.press("Tab")
            pages[name] = page

        desktop = pages["desktop"]
        steps = desktop.locator("#steps-input input")
        steps.fill("12")
        steps.press("Tab")
        desktop.click("#start-btn")
        seen = []

        def disabled_and_phase():
            seen.append(desktop.inner_text("#run-status"))
            return desktop.locator("#start-btn").is_disabled()

        wait_until(disabled_and_phase, timeout=60, interval=0.1)  # Start off while the page's own run trains
        assert desktop.inner_text("#form-error").strip() == ""
        # the first step's line (a 0.2 s step can be past step 1 by the next tick: any step counts)
        stepped = re.compile(r"step [1-9]\d* / 12")
        wait_until(lambda: seen.append(desktop.inner_text("#run-status")) or stepped.search(seen[-1]), 120, 0.1)
        phases = ("Loading the policy", "Preparing the trainer", "First step")
        assert any(p in s for s in seen for p in phases), seen[:20]  # the first seconds say what is happening
        assert not any("ETA –" in s for s in seen), "a status line without a word of what is happening"
        desktop.screenshot(path=str(ARTIFACTS / "train-own-run-desktop.png"))
        wait_until(lambda: "finished" in desktop.inner_text("#run-status"), timeout=180)
        wait_until(lambda: desktop.locator("#start-btn").is_enabled(), timeout=30)  # on again when it ended
        wait_until(lambda: "Run summary" in desktop.inner_text("#run-summary"), timeout=30)
        desktop.screenshot(path=str(ARTIFACTS / "train-ended-desktop.png"))
        name = next(
            a.name for a in [controller.runner.run(r.name) for r in controller.runner.runs()] if a.name != "collapsed"
        )
        assert (tmp_path / name / "summary.json").is_file()
        browser.close()
