"""A public newcomer's first screen in a real browser: its own empty page, whatever other visitors have run.

The browser's page comes from 127.0.0.1; another visitor is simulated from 127.0.0.3 with the page's own events
(``apputil.call_event``). With that visitor's finished run on disk (a collapse warning and a summary of its own),
the newcomer's page says "No run yet" in its language, draws no point of that run and shows neither its warning
nor its summary; Stop says there is nothing to stop; and a click on that run's row in the Runs table moves Run
details to it. With that visitor's run training, the newcomer's page says the slot is busy, with that run's step,
and still draws none of its points. Screenshots go to ``artifacts/``.

``python -m pytest tests/browser/test_browser_own_page.py`` (about a minute; needs /usr/bin/chromium).
"""

import os
import re
import time
from dataclasses import replace

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, REWARD_POINTS_JS, HeldJob, call_event, running_app, wait_until
from conftest import ARTIFACTS
from factories import someones_finished_run

from rloo_demo.config import RunConfig
from rloo_demo.i18n import load
from rloo_demo.public.limits import PUBLIC
from rloo_demo.server import runner as runner_module
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.forms import FORM_FIELDS, defaults

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
OTHER = "127.0.0.3"
LIMITS = replace(PUBLIC, abandon_seconds=None)  # the other visitor has no page that ticks: its run is not abandoned
LOGGED = 5  # steps the other visitor's run in training has logged


class StepsJob(HeldJob):
    """A run that holds the slot having logged ``LOGGED`` steps: a page that took it for its own would plot them."""

    def start(self, resources_checked: bool = False):
        for step in range(1, LOGGED + 1):
            self.state.channel.publish({"step": step, "reward": 0.1 * step, "time": float(step), "step_time": 1.0})
        return super().start(resources_checked)


def plain(markdown: str) -> str:
    return markdown.replace("**", "")


def fresh_page(browser, url, language="en-US", width=1440, height=900):
    """A new visitor's page: a browser context of its own (no client id kept), loaded and ticking."""
    page = browser.new_context(locale=language, viewport={"width": width, "height": height}).new_page()
    page.goto(url)
    page.wait_for_selector("#start-btn", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#run-estimate').innerText.length > 10", timeout=60_000)
    return page


def status(page) -> str:
    return page.inner_text("#run-status")


@pytest.mark.slow
def test_a_newcomer_sees_its_own_empty_page_beside_another_visitors_finished_run(space_runs_dir):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    ka = load("ka")
    older = RunFolder.create(RunConfig(output_dir=str(space_runs_dir), run_name="their-first", max_steps=3))
    older.append_metrics({"step": 1, "reward": 0.2})
    older.set_status("finished", step=1)
    someones_finished_run(space_runs_dir, "theirs", "their-client", OTHER)  # newer: Run details starts on it
    with running_app(space_runs_dir, limits=LIMITS) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = fresh_page(browser, url, "ka-GE")
        wait_until(lambda: plain(ka["train.no_run"]) in status(page), timeout=30)
        time.sleep(2.5)  # two ticks: a page that attached to the run would have drawn it by now
        assert plain(ka["train.no_run"]) in status(page) and "theirs" not in status(page)
        assert page.evaluate(REWARD_POINTS_JS) == 0
        assert page.inner_text("#train-alerts").strip() == "" and page.inner_text("#run-summary").strip() == ""

        page.click("#stop-btn")  # idle: there is nothing to stop, in the page's language
        wait_until(lambda: page.inner_text("#form-error").strip() == ka["train.nothing_to_stop"], timeout=15)
        page.screenshot(path=str(ARTIFACTS / "own-page-beside-a-finished-run.png"))

        # the other visitor's runs stay in Runs: a click on a row moves Run details to that run
        page.get_by_role("tab", name=ka["tab.runs"], exact=True).click()
        wait_until(lambda: page.locator("#runs-detail input").input_value() == "theirs", timeout=30)
        wait_until(lambda: "--max-steps 2" in page.inner_text("#run-command"), timeout=30)
        cell = page.locator("#runs-table [role=gridcell]", has_text=re.compile(r"^\s*their-first\s*$")).first
        cell.click()  # which also opens the run on the Rollouts tab
        page.wait_for_selector("button[role=tab][data-tab-id=rollouts][aria-selected=true]", timeout=15_000)
        page.get_by_role("tab", name=ka["tab.runs"], exact=True).click()
        wait_until(lambda: page.locator("#runs-detail input").input_value() == "their-first", timeout=30)
        wait_until(lambda: "--max-steps 3" in page.inner_text("#run-command"), timeout=30)
        page.locator("#run-command").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "own-page-run-details-follow-the-row.png"))
        browser.close()


@pytest.mark.slow
def test_a_newcomer_is_told_the_slot_is_busy_and_sees_none_of_that_runs_plots(space_runs_dir, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setattr(runner_module, "TrainingJob", StepsJob)
    monkeypatch.setattr(runner_module, "check_resources", lambda config: None)
    ARTIFACTS.mkdir(exist_ok=True)
    en = load("en")
    for old in space_runs_dir.iterdir():
        if old.is_dir():
            import shutil

            shutil.rmtree(old)
    with running_app(space_runs_dir, limits=LIMITS) as (url, controller), sync_playwright() as p:
        form = defaults()
        data = ["their-client", *[form[f] for f in FORM_FIELDS], "en"]
        _, _, error, _, _ = call_event(url, "train_start", data, "theirs", address=OTHER)
        assert error == "" and len(controller.runner.active()) == 1
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        for name, (width, height) in {"desktop": (1440, 900), "phone": (390, 844)}.items():
            page = fresh_page(browser, url, width=width, height=height)
            busy = en["train.slot_busy"].split("{step}")[0]
            wait_until(lambda page=page, busy=busy: busy in status(page), timeout=30)
            shown = status(page)
            assert plain(en["train.no_run"]) in shown and f"{LOGGED} / {form['max_steps']}" in shown, shown
            time.sleep(2.5)  # two ticks more
            assert page.evaluate(REWARD_POINTS_JS) == 0  # the other run has 5 points: none drawn here
            assert page.locator("#start-btn").is_enabled()  # a Start takes a place in the line, as the note says
            page.screenshot(path=str(ARTIFACTS / f"own-page-slot-busy-{name}.png"))
        browser.close()
