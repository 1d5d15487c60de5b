"""Refusals in a real browser, in Georgian and Russian: a K of 1000 typed into the estimator lab's K box is refused
by the slider's label in the page's language, with no toast of gradio's, and the box goes back to the K its table
shows; K = 1000 on the Train form is refused once, by its label, in the form's error box; gradio's own footer is in
Georgian too. Screenshots go to ``artifacts/refusal-*.png``.

``python -m pytest tests/browser/test_browser_refusals.py`` (about a minute; needs /usr/bin/chromium).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, no_traceback, running_app
from apputil import UNPACED as LIMITS
from conftest import ARTIFACTS

from rloo_demo.i18n import STORAGE_KEY, load, t
from rloo_demo.ui.forms import field_label

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
HAS_TEXT_JS = "([sel, text]) => (document.querySelector(sel) || {innerText: ''}).innerText.includes(text)"
TOAST = "[data-testid='toast-body'], .toast-body"  # gradio's error toast


def open_page(browser, url, locale):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(f"localStorage.setItem('{STORAGE_KEY}', '{locale}')")
    page = context.new_page()
    page.goto(url)
    page.get_by_role("button", name=load(locale)["train.start"], exact=True).wait_for(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#run-estimate').innerText.length > 10", timeout=60_000)
    return context, page


@pytest.mark.slow
@pytest.mark.parametrize("locale", ["ka", "ru"])
def test_a_k_of_1000_is_refused_by_its_label_without_a_toast(tmp_path, caplog, capfd, locale):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    text = load(locale)
    with running_app(tmp_path / "runs", limits=LIMITS) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context, page = open_page(browser, url, locale)
        caplog.clear()
        capfd.readouterr()

        # the Train form: refused once, by the K box's label, in the form's error box
        page.fill("#k-input input", "1000")
        page.press("#k-input input", "Enter")
        refused = t(locale, "limits.cap.num_generations", limit=LIMITS.max_k, value=1000)
        page.wait_for_function(HAS_TEXT_JS, arg=["#form-error", refused], timeout=30_000)
        page.get_by_role("button", name=text["train.start"], exact=True).click()
        page.wait_for_function(HAS_TEXT_JS, arg=["#form-error", text["train.not_started"].strip("*")], timeout=30_000)
        shown = page.inner_text("#action-bar")
        assert shown.count(refused) == 1, shown  # shown once: not beside the estimate as well
        assert field_label("num_generations", locale) in page.inner_text("#form-error")
        page.screenshot(path=str(ARTIFACTS / f"refusal-{locale}-train-k.png"))

        # the estimator lab's K slider: its box refused by the slider's label, and put back to the table's K
        page.get_by_role("tab", name=text["tab.rollouts"], exact=True).click()
        page.get_by_text(text["toy.accordion"], exact=True).click()
        page.wait_for_function("() => document.querySelector('#toy-table').innerText.length > 20", timeout=60_000)
        box = page.locator("#toy-k input[type=number]")
        box.fill("1000")
        box.blur()  # the slider's box sends its value (its release event) when it loses focus
        label = t(locale, "common.quoted", text=text["toy.k"])
        page.wait_for_function(HAS_TEXT_JS, arg=["#toy-table", label], timeout=30_000)
        assert "1000" in page.inner_text("#toy-table")
        page.wait_for_function(
            "() => document.querySelector('#toy-k input[type=number]').value === '4'", timeout=10_000
        )
        page.locator("#toy-panel").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"refusal-{locale}-toy-k.png"))
        assert page.locator(TOAST).count() == 0, page.locator(TOAST).all_inner_texts()

        if locale == "ka":  # gradio's footer, which gradio itself does not translate into Georgian
            footer = page.inner_text("footer")
            assert t("ka", "common.built_with_gradio") in footer and "Built with" not in footer, footer
        context.close()
        browser.close()
    no_traceback(caplog, capfd)
