"""Re-take the README screenshots (docs/*.png) from a finished run, in headless Debian Chromium.

    python scripts/bench_engine.py --output-dir /tmp/shots     # a default run to photograph
    python scripts/screenshots.py /tmp/shots

The browser test (tests/test_browser.py) takes the same views during a live run and saves them to artifacts/.
"""

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from apputil import CHROMIUM, CHROMIUM_FLAGS, REWARD_POINTS_JS, running_app, wait_until  # noqa: E402


def main(runs_dir: str) -> None:
    from playwright.sync_api import sync_playwright

    with running_app(Path(runs_dir)) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#start-btn")
        wait_until(lambda: page.evaluate(REWARD_POINTS_JS) > 0, timeout=60)
        time.sleep(1)
        page.screenshot(path=str(ROOT / "docs" / "train-tab.png"), full_page=True)
        page.get_by_role("tab", name="Rollouts").click()
        page.wait_for_selector("#rollout-groups table.rloo-table tbody tr", timeout=30_000)
        page.locator("#group-table [role=gridcell]").first.click()
        page.wait_for_function("document.querySelector('#arithmetic').innerText.includes('baseline = mean')")
        time.sleep(1)
        page.screenshot(path=str(ROOT / "docs" / "rollouts-tab.png"), full_page=True)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs")
