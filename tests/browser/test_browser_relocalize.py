"""Two page texts in a real browser: switching the header's language selector writes the Runs table and
Compare's tables (already on screen, from the server) again in the new language at once; the Train tab's warning
has a button that opens the step it fired at on the Rollouts tab, not following the live run.

``python -m pytest tests/browser/test_browser_relocalize.py`` (about a minute; needs /usr/bin/chromium).
"""

import json
import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app, wait_until
from apputil import UNPACED as LIMITS
from conftest import ARTIFACTS
from factories import finished_run, group, records

from rloo_demo.config import RunConfig
from rloo_demo.i18n import load, t
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.views.train import run_alerts

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
KEPT = (10, 20, 25, 30)  # the steps whose rollouts the collapsed run keeps


def collapsed_run(root) -> list[dict]:
    """A finished run whose judges cross the collapse thresholds (``test_run_summary``), with rollouts of some steps."""
    metrics = [r | {"max_steps": 30} for r in records(30, collapse_from=21)]
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name="collapsed"))
    with open(run.path / "metrics.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in metrics)
    for step in KEPT:
        run.append_rollouts(step, [group(step, 0, [0.2, -0.1, 0.3, -0.4], "collapsed")])
    run.set_status("finished", step=30, created=2_000_000_000.0)  # the newest: the page watches it
    return metrics


def text_of(page, selector) -> str:
    return page.inner_text(selector) if page.locator(selector).count() else ""


@pytest.mark.slow
def test_a_language_switch_rewrites_the_tables_and_a_warning_opens_its_step(tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    finished_run(tmp_path / "runs")
    metrics = collapsed_run(tmp_path / "runs")
    fired = run_alerts(metrics)[0]["step"]
    nearest = min(KEPT, key=lambda s: abs(s - fired))
    with running_app(tmp_path / "runs", limits=LIMITS) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(url)
        page.wait_for_selector("#start-btn", timeout=60_000)

        # the warning's button, then the step it names on the Rollouts tab
        page.wait_for_selector("#alert-open", timeout=60_000)
        assert page.inner_text("#alert-open").strip() == t("en", "alert.open", step=fired)
        page.click("#alert-open")
        wait_until(lambda: f"collapsed s{nearest} g0 c0" in text_of(page, "#rollout-groups"), timeout=30)
        assert page.input_value("#rollout-step input[type=number]") == str(nearest)
        assert not page.is_checked("#rollout-follow input")
        page.screenshot(path=str(ARTIFACTS / "alert-opened-its-step.png"))

        # Compare's tables and the Runs table on screen, then the switch to Russian
        page.get_by_role("tab", name="Compare").click()
        page.wait_for_function("() => document.querySelector('#compare-run input').value === 'done'", timeout=30_000)
        page.click("#sample-btn")
        wait_until(lambda: load("en")["compare.base"] in text_of(page, "#base-samples"), timeout=90)
        page.get_by_role("tab", name="Runs").click()
        wait_until(lambda: "collapsed" in text_of(page, "#runs-table"), timeout=30)
        assert load("en")["runs.col_status"] in text_of(page, "#runs-table")
        page.click("#language input")
        page.get_by_role("option", name="Русский").click()
        wait_until(lambda: load("ru")["runs.col_status"] in text_of(page, "#runs-table"), timeout=30)
        page.screenshot(path=str(ARTIFACTS / "runs-after-switch-ru.png"))
        page.get_by_role("tab", name=load("ru")["tab.compare"], exact=True).click()
        # written at the switch: the tab's select event redraws the picker, not the tables
        wait_until(lambda: load("ru")["compare.base"] in text_of(page, "#base-samples"), timeout=30)
        assert load("ru")["compare.trained"] in text_of(page, "#trained-samples")
        browser.close()
