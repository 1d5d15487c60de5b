"""Token by token in a real browser: headless Debian Chromium, the app as the image runs it (public
mode, runs outside the working folder and /tmp).

Selects a completion in the Rollouts tab and finds it drawn as coloured token spans, recolours them by KL, finds
the batch heatmap, probes a held-out prompt across the run's snapshots, and saves ``artifacts/tokens-tab.png``.
``python -m pytest tests/browser/test_browser_tokens.py``; needs /usr/bin/chromium (``scripts/test.sh`` installs it).
"""

import os
import time

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app
from conftest import ARTIFACTS

from rloo_demo.i18n import load

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

# Background colours of the token spans in #token-view, as the browser computed them
SPAN_COLOURS_JS = """() => Array.from(document.querySelectorAll('#token-view span.rloo-tok'))
  .map(s => getComputedStyle(s).backgroundColor)"""
HEATMAP_JS = """() => {
  const el = document.querySelector('#kl-heatmap .js-plotly-plot');
  return el && el.data && el.data[0] ? el.data[0].type : null;
}"""


@pytest.mark.slow
def test_select_a_completion_and_see_its_tokens(space_runs_dir):
    from playwright.sync_api import sync_playwright

    from rloo_demo.public.gates import Caller
    from rloo_demo.public.limits import PUBLIC

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(space_runs_dir, limits=PUBLIC) as (url, controller), sync_playwright() as p:
        settings = {"max_steps": 20, "prompts_per_step": 2, "max_new_tokens": 16, "snapshot_every": 10}
        name = controller.start(settings, Caller("browser-test", "127.0.0.1"))
        deadline = time.time() + 600
        while controller.runner.get_active(name) is not None and time.time() < deadline:
            controller.runner.heartbeat(owner="browser-test")  # its starter is here: not an abandoned run
            time.sleep(0.5)
        assert controller.view(name).status == "finished"

        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("tab", name="Rollouts").click()
        page.wait_for_selector("#group-table [role=gridcell]", timeout=60_000)
        assert "Select a completion" in page.inner_text("#token-view")
        page.locator("#group-table [role=gridcell]").first.click()
        page.wait_for_selector("#token-view span.rloo-tok", timeout=30_000)

        colours = page.evaluate(SPAN_COLOURS_JS)
        assert len(colours) >= 2
        # Δ log π: every token green (reinforced) or red (suppressed), by the sign of its change
        assert all(c.startswith(("rgba(61, 190, 139", "rgba(217, 83, 79")) for c in colours), colours
        assert "Σ Δ log π" in page.inner_text("#token-note")

        page.get_by_label("KL k1 = log π − log π_ref").check()
        page.wait_for_function(
            "document.querySelector('#token-view .rloo-tokens').dataset.measure === 'k1'", timeout=15_000
        )
        colours = page.evaluate(SPAN_COLOURS_JS)
        assert len(colours) >= 2, colours
        assert all(c.startswith(("rgba(232, 163, 61", "rgba(76, 155, 232")) for c in colours), colours
        page.wait_for_function(f"({HEATMAP_JS})() === 'heatmap'", timeout=15_000)  # the batch's KL heatmap
        assert "first quarter" in page.inner_text("#kl-heatmap-note")
        page.get_by_label("Δ log π (what the update did)").check()
        page.wait_for_function(
            "document.querySelector('#token-view .rloo-tokens').dataset.measure === 'delta'", timeout=15_000
        )
        page.locator("#tokens-section").screenshot(path=str(ARTIFACTS / "tokens-tab.png"))

        page.wait_for_function("document.querySelector('#probe-prompt input').value.length > 0", timeout=30_000)
        page.click("#probe-btn")
        page.wait_for_selector("#probe-view table", timeout=120_000)
        headers = page.locator("#probe-view th").all_inner_texts()
        assert headers[0] == "#" and headers[1].startswith("base policy") and len(headers) == 1 + 3, headers
        assert "same random numbers" in page.inner_text("#probe-note")
        page.screenshot(path=str(ARTIFACTS / "rollouts-tokens-full.png"), full_page=True)

        # the same views in Georgian and Russian: the legend, note and probe written in the page's language
        page.close()  # its ticks would keep the server busy while the next pages load
        for locale, language in (("ka", "ka-GE"), ("ru", "ru-RU")):
            text = load(locale)
            context = browser.new_context(locale=language, viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(url)
            # a fresh context loads the whole front end again: on a busy CI machine that once took over 30 s
            page.get_by_role("tab", name=text["tab.rollouts"], exact=True).click(timeout=90_000)
            page.wait_for_selector("#group-table [role=gridcell]", timeout=60_000)
            page.locator("#group-table [role=gridcell]").first.click()
            page.wait_for_selector("#token-view span.rloo-tok", timeout=30_000)
            assert text["tokens.reinforced"] in page.inner_text("#token-view")
            assert text["tokens.note_delta_lesson"][:30] in page.inner_text("#token-note")
            page.wait_for_function("document.querySelector('#probe-prompt input').value.length > 0", timeout=30_000)
            page.click("#probe-btn")
            page.wait_for_selector("#probe-view table", timeout=120_000)
            base = text["probe.label_base"].split("(")[0].strip()
            assert page.locator("#probe-view th").all_inner_texts()[1].startswith(base)
            page.screenshot(path=str(ARTIFACTS / f"i18n-{locale}-tokens.png"), full_page=True)
            context.close()
        browser.close()
    assert (ARTIFACTS / "tokens-tab.png").stat().st_size > 10_000
