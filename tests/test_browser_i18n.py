"""The page in each language in a real browser: the browser's language picks it (Georgian too, which gradio does
not offer itself), the header selector overrides it, and a screenshot of every tab goes to ``artifacts/``.
``python -m pytest tests/test_browser_i18n.py``; needs /usr/bin/chromium and a font with Georgian script
(``fonts-noto-core``; scripts/test.sh installs both).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app
from conftest import ARTIFACTS

from rloo_demo.i18n import LOCALES, load

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
BROWSER_LANGUAGE = {"en": "en-US", "ro": "ro-RO", "ka": "ka-GE", "ru": "ru-RU"}
TABS = ("train", "rollouts", "compare", "runs")


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
