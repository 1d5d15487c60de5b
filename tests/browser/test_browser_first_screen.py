"""The Train tab's first screen in a real browser: Start in sight on a fresh page and during a run, at a desktop's
1440x900 and a phone's 390x844, and still in sight after scrolling (the action bar is sticky); the plots show
titled empty axes before the first run.

``python -m pytest tests/browser/test_browser_first_screen.py`` (about a minute; needs /usr/bin/chromium).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app, wait_until
from conftest import ARTIFACTS

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
IN_VIEW_JS = """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
  return [r.top, r.bottom, r.left, r.right, window.innerHeight, window.innerWidth]; }"""
TITLES_JS = """() => [...document.querySelectorAll('#reward-plot .gtitle, #kl-plot .gtitle')].map(e => e.textContent)"""


def in_view(page, selector) -> bool:
    top, bottom, left, right, height, width = page.evaluate(IN_VIEW_JS, selector)
    return top >= 0 and bottom <= height and left >= 0 and right <= width


@pytest.mark.slow
def test_start_is_on_the_first_screen_fresh_and_during_a_run(space_runs_dir):
    from playwright.sync_api import sync_playwright

    from rloo_demo.public.limits import PUBLIC

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(space_runs_dir, limits=PUBLIC) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        pages = {}
        for name, (width, height) in VIEWPORTS.items():
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url)
            page.wait_for_selector("#start-btn", timeout=60_000)
            page.wait_for_function("() => document.querySelector('#run-estimate').innerText.length > 10")
            assert in_view(page, "#start-btn"), f"{name}: Start is below the first screen"
            assert in_view(page, "#run-status"), f"{name}: the status line is below the first screen"
            # before any run: titled, empty axes, not blank boxes
            wait_until(lambda page=page: len(page.evaluate(TITLES_JS)) == 2, timeout=60)
            assert page.evaluate(TITLES_JS) == ["Reward", "KL to reference"]
            page.screenshot(path=str(ARTIFACTS / f"first-screen-{name}.png"))
            pages[name] = page

        desktop = pages["desktop"]
        desktop.click("#start-btn")
        wait_until(lambda: "step" in desktop.inner_text("#run-status"), timeout=120)
        assert in_view(desktop, "#start-btn") and in_view(desktop, "#stop-btn")
        desktop.mouse.wheel(0, 1800)  # down among the plots and the folds
        wait_until(lambda: desktop.evaluate("window.scrollY") > 500, timeout=10)
        assert in_view(desktop, "#stop-btn"), "the action bar scrolled away"
        assert in_view(desktop, "#run-status")
        desktop.screenshot(path=str(ARTIFACTS / "first-screen-desktop-during-a-run.png"))

        phone = pages["phone"]
        phone.reload()  # the phone's page is another visitor's view of the same run
        phone.wait_for_selector("#start-btn", timeout=60_000)
        wait_until(lambda: "step" in phone.inner_text("#run-status"), timeout=60)
        assert in_view(phone, "#start-btn")
        phone.mouse.wheel(0, 2500)
        wait_until(lambda: phone.evaluate("window.scrollY") > 500, timeout=10)
        assert in_view(phone, "#stop-btn"), "on a phone the action bar scrolled away"
        phone.screenshot(path=str(ARTIFACTS / "first-screen-phone-during-a-run.png"))
        for active in controller.runner.active():
            active.job.stop()
        browser.close()
