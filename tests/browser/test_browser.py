"""A real browser on the app: headless Debian Chromium driven by Playwright.

Clicks Start, watches the reward plot gain points, opens Rollouts and finds a filled group, and saves screenshots
to ``artifacts/`` (light and dark theme). ``python -m pytest tests/browser/test_browser.py``; needs /usr/bin/chromium
(``scripts/test.sh`` installs it).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, REWARD_POINTS_JS, running_app, wait_until
from conftest import ARTIFACTS

# [class, advantage cell text] of every completion row of the Rollouts tab's tables
ROW_CLASS_AND_ADVANTAGE_JS = """() => [...document.querySelectorAll('#rollout-groups table.rloo-table')].flatMap(t => {
  const column = [...t.querySelectorAll('thead th')].findIndex(th => th.innerText.trim() === 'advantage');
  return [...t.querySelectorAll('tbody tr')].map(r => [r.className, r.cells[column].innerText.trim()]);
})"""

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")


@pytest.mark.slow
def test_start_watch_reward_and_rollouts(space_runs_dir):
    """As the image runs the app: public mode, runs outside the working folder and /tmp."""
    from playwright.sync_api import sync_playwright

    from rloo_demo.public.limits import PUBLIC

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(space_runs_dir, limits=PUBLIC) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#start-btn", timeout=30_000)
        page.click("#start-btn")
        wait_until(lambda: page.evaluate(REWARD_POINTS_JS) >= 3, timeout=120)
        first = page.evaluate(REWARD_POINTS_JS)
        wait_until(lambda: page.evaluate(REWARD_POINTS_JS) > first, timeout=60)
        assert "step" in page.inner_text("#run-status")
        page.reload()  # a reloaded page re-attaches to the run in training and redraws its history
        wait_until(lambda: page.evaluate(REWARD_POINTS_JS) > first, timeout=60)
        page.screenshot(path=str(ARTIFACTS / "train-tab.png"), full_page=True)

        page.get_by_role("tab", name="Rollouts").click()
        page.wait_for_selector("#rollout-groups table.rloo-table tbody tr", timeout=30_000)
        # each row's colour class against the advantage printed in the same row
        rows = page.evaluate(ROW_CLASS_AND_ADVANTAGE_JS)
        assert len(rows) >= 4
        for cls, shown in rows:
            advantage = float(shown.replace("−", "-"))
            if abs(advantage) >= 0.001:  # a printed ±0.000 may be a tiny advantage of either sign
                assert cls == ("rloo-pos" if advantage > 0 else "rloo-neg"), (cls, shown)
            else:
                assert cls in ("rloo-pos", "rloo-neg", "rloo-zero"), (cls, shown)
        # advantages in a group sum to zero, so a step that teaches anything has rows of both colours
        assert {"rloo-pos", "rloo-neg"} <= {cls for cls, _ in rows}
        page.locator("#group-table [role=gridcell]").first.click()  # first completion of the selected group
        page.wait_for_function(
            "document.querySelector('#arithmetic').innerText.includes('baseline = mean')", timeout=15_000
        )
        page.screenshot(path=str(ARTIFACTS / "rollouts-tab.png"), full_page=True)

        dark = browser.new_page(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
        dark.goto(url + "?__theme=dark")
        wait_until(lambda: dark.evaluate(REWARD_POINTS_JS) >= 2, timeout=60)
        dark.screenshot(path=str(ARTIFACTS / "train-tab-dark.png"), full_page=True)

        page.get_by_role("tab", name="Compare").click()  # during the run: samples from a snapshot of the policy
        page.wait_for_function("document.querySelector('#compare-run input').value.length > 0", timeout=30_000)
        page.click("#sample-btn")
        try:
            page.wait_for_selector("#trained-samples td.rloo-text", timeout=60_000)
        finally:
            page.screenshot(path=str(ARTIFACTS / "compare-tab.png"), full_page=True)
        assert page.locator("#base-samples td.rloo-text").count() >= 4  # one completion per sample

        page.get_by_role("tab", name="Train").click()
        page.click("#stop-btn")
        active = controller.runner.latest_active()
        if active is not None:
            active.job.join(60)

        page.get_by_role("tab", name="Runs").click()
        page.wait_for_function(
            "document.querySelector('#run-command') && "
            "document.querySelector('#run-command').innerText.includes('python -m rloo_demo train')",
            timeout=30_000,
        )
        assert "stopped" in page.inner_text("#runs-table")
        # the downloads of the selected run are served (in the Space layout gradio refused them before)
        page.wait_for_selector("#runs-downloads a", timeout=30_000)
        links = page.locator("#runs-downloads a")
        assert links.count() == 4 and "Error" not in page.inner_text("#runs-downloads")
        href = links.first.get_attribute("href")
        assert page.request.get(href if href.startswith("http") else url + href.lstrip("/")).status == 200
        page.screenshot(path=str(ARTIFACTS / "runs-tab.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "train-tab.png").stat().st_size > 10_000
