"""The page in each language in a real browser: the browser's language picks it (Georgian too, which gradio does
not offer itself), the header selector overrides it, and a screenshot of every tab goes to ``artifacts/``.
``python -m pytest tests/browser/test_browser_i18n.py``; needs /usr/bin/chromium and a font with Georgian script
(``fonts-noto-core``; scripts/test.sh installs both).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app
from conftest import ARTIFACTS

from rloo_demo.i18n import LOCALES, load

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
BROWSER_LANGUAGE = {"en": "en-US", "ro": "ro-RO", "ka": "ka-GE", "ru": "ru-RU"}
TABS = ("train", "rollouts", "compare", "runs", "lessons")


def test_each_locale_renders_every_tab(tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(tmp_path / "runs") as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        for locale in LOCALES:
            text = load(locale)
            context = browser.new_context(locale=BROWSER_LANGUAGE[locale], viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(url)
            # static text (gr.I18n, in the browser) and server text (written on load) both in the language
            page.get_by_role("button", name=text["train.start"], exact=True).wait_for(timeout=30_000)
            page.wait_for_function(
                "s => document.querySelector('#run-status').innerText.includes(s)",
                arg=text["train.no_run"].split("**")[0].strip(),
                timeout=30_000,
            )
            page.wait_for_function("() => document.querySelector('#run-estimate').innerText.length > 10")
            assert page.evaluate("document.documentElement.lang") == locale
            for tab in TABS:
                page.get_by_role("tab", name=text[f"tab.{tab}"], exact=True).click()
                page.wait_for_timeout(600)
                page.screenshot(path=str(ARTIFACTS / f"i18n-{locale}-{tab}.png"), full_page=True)
            context.close()

        # the header selector overrides the browser: a Russian browser, Georgian chosen, kept across reloads
        context = browser.new_context(locale="ru-RU", viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(url)
        page.get_by_role("button", name=load("ru")["train.start"], exact=True).wait_for(timeout=30_000)
        page.locator("#language input").click()
        page.get_by_role("option", name="ქართული").click()
        page.get_by_role("button", name=load("ka")["train.start"], exact=True).wait_for(timeout=30_000)
        page.reload()
        page.get_by_role("button", name=load("ka")["train.start"], exact=True).wait_for(timeout=30_000)
        assert page.evaluate("localStorage.getItem('rloo-demo-locale')") == "ka"
        context.close()
        browser.close()


# Visible button texts outside gradio's own footer, tab buttons apart
BUTTONS_JS = """() => [...document.querySelectorAll('button')]
  .filter((b) => b.offsetParent && !b.closest('footer') && b.getAttribute('role') !== 'tab')
  .map((b) => b.innerText.replace(/[▼▲◀▶↺↻]/g, '').trim()).filter(Boolean)"""
TABS_JS = "() => [...document.querySelectorAll('[role=tab]')].map((t) => t.innerText.trim())"
REWARD_TITLE_JS = "() => document.querySelector('#reward-plot .gtitle')?.textContent"


@pytest.mark.slow
def test_the_selector_switches_every_text_in_place(tmp_path):
    """No reload (a marker set on the page survives); every tab label and visible button in the chosen language,
    and the server's own text too: the status line and a plot title."""
    from playwright.sync_api import sync_playwright

    english = load("en")
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(tmp_path / "runs") as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context = browser.new_context(locale="en-US", viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.goto(url)
        page.get_by_role("button", name=english["train.start"], exact=True).wait_for(timeout=30_000)
        page.wait_for_function(REWARD_TITLE_JS, timeout=30_000)
        page.evaluate("window.rlooMarker = 'kept'")
        for locale, name in (("ru", "Русский"), ("ka", "ქართული")):
            text = load(locale)
            page.locator("#language input").click()
            page.get_by_role("option", name=name).click()
            tabs = [text[f"tab.{tab}"] for tab in TABS]
            same = f"t => JSON.stringify(({TABS_JS})()) === JSON.stringify(t)"
            page.wait_for_function(same, arg=tabs, timeout=15_000)
            page.wait_for_function(
                "s => document.querySelector('#run-status').innerText.includes(s)",
                arg=text["train.no_run"].split("**")[0].strip(),
                timeout=15_000,
            )
            page.wait_for_function(f"t => ({REWARD_TITLE_JS})() === t", arg=text["plot.reward"], timeout=15_000)
            assert page.evaluate("window.rlooMarker") == "kept", "the page reloaded"
            assert page.evaluate("localStorage.getItem('rloo-demo-locale')") == locale
            # every visible button: none left in English where the locale has its own text
            left = {v for k, v in english.items() if text.get(k) != v}
            for tab in TABS:
                page.get_by_role("tab", name=text[f"tab.{tab}"], exact=True).click()
                page.wait_for_function(
                    "name => [...document.querySelectorAll('[role=tab]')].some((t) => t.innerText.trim() === name"
                    " && t.getAttribute('aria-selected') === 'true')",
                    arg=text[f"tab.{tab}"],
                )
                english_buttons = [b for b in page.evaluate(BUTTONS_JS) if b in left]
                assert not english_buttons, f"{locale} {tab}: buttons still in English: {english_buttons}"
                page.screenshot(path=str(ARTIFACTS / f"i18n-switched-{locale}-{tab}.png"), full_page=True)
            page.get_by_role("tab", name=text["tab.train"], exact=True).click()
        context.close()
        browser.close()
