"""A long prompt in a real browser: 25,000 characters pasted into Compare and into the probe
reach the server whole (no browser-side cut at a ``max_length``) and are refused with their length and the limit
named, in the page's language; a prompt within the limit but past the policy's context is sampled with a note of
how many tokens were dropped. Nothing the server logged or printed is a traceback.

``python -m pytest tests/browser/test_browser_long_prompt.py`` (about a minute; needs /usr/bin/chromium).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, no_traceback, running_app
from apputil import UNPACED as LIMITS
from conftest import ARTIFACTS
from factories import LONG, finished_run

from rloo_demo.i18n import STORAGE_KEY, load, t

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
HUGE = "This movie was " + "x" * (25_000 - len("This movie was "))
LOCALE = "ru"
HAS_TEXT_JS = "([sel, text]) => (document.querySelector(sel) || {innerText: ''}).innerText.includes(text)"


def refusal() -> str:
    return t(LOCALE, "prompt.too_long", chars=f"{len(HUGE):,}", limit=f"{LIMITS.max_prompt_chars:,}")


def cut_head() -> str:
    """The note's words before its first number, in the page's language."""
    return t(LOCALE, "prompt.cut").split("{")[0]


@pytest.mark.slow
def test_25000_characters_in_compare_and_the_probe_get_a_refusal_and_no_traceback(tmp_path, caplog, capfd):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    finished_run(tmp_path / "runs")
    with running_app(tmp_path / "runs", limits=LIMITS) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        context.add_init_script(f"localStorage.setItem('{STORAGE_KEY}', '{LOCALE}')")
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("#start-btn", timeout=60_000)
        caplog.clear()
        capfd.readouterr()

        page.get_by_role("tab", name=load(LOCALE)["tab.compare"], exact=True).click()
        page.wait_for_function("() => document.querySelector('#compare-run input').value === 'done'", timeout=30_000)
        page.fill("#compare-prompt textarea", HUGE)
        assert len(page.input_value("#compare-prompt textarea")) == len(HUGE), "the browser cut the prompt"
        page.click("#sample-btn")
        page.wait_for_function(HAS_TEXT_JS, arg=["#compare-summary", refusal()], timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "long-prompt-compare-refused.png"))

        page.fill("#compare-prompt textarea", LONG)  # within the limit, past the policy's 256 positions
        page.click("#sample-btn")
        page.wait_for_function(HAS_TEXT_JS, arg=["#compare-summary", cut_head()], timeout=90_000)
        assert "<tbody>" in page.inner_html("#base-samples")  # sampled, from the prompt's end
        page.screenshot(path=str(ARTIFACTS / "long-prompt-compare-cut.png"))

        page.get_by_role("tab", name=load(LOCALE)["tab.rollouts"], exact=True).click()
        # the tab's select event fills the probe's box with a held-out prompt: typed over once it has
        page.wait_for_function("() => document.querySelector('#probe-prompt input').value.length > 0", timeout=30_000)
        page.fill("#probe-prompt input", HUGE)
        page.press("#probe-prompt input", "Enter")
        page.click("#probe-btn")
        page.wait_for_function(HAS_TEXT_JS, arg=["#probe-note", refusal()], timeout=60_000)
        page.locator("#probe-note").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "long-prompt-probe-refused.png"))

        page.fill("#probe-prompt input", LONG)
        page.press("#probe-prompt input", "Enter")
        page.click("#probe-btn")
        page.wait_for_function(HAS_TEXT_JS, arg=["#probe-view", cut_head()], timeout=90_000)
        browser.close()
    no_traceback(caplog, capfd)
