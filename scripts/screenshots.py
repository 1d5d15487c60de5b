"""Re-take the README screenshots (docs/*.png: the Train and Rollouts tabs, and the Rollouts tab's token view)
from a finished run, in headless Debian Chromium.

    python scripts/bench_engine.py --output-dir /tmp/shots     # a default run to photograph
    python scripts/screenshots.py /tmp/shots
    python scripts/screenshots.py /tmp/shots --only tokens     # docs/tokens-tab.png alone

The browser test (tests/browser/test_browser.py) takes the same views during a live run and saves them to artifacts/.
"""

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from apputil import CHROMIUM, CHROMIUM_FLAGS, REWARD_POINTS_JS, running_app, wait_until  # noqa: E402


def main(runs_dir: str, only: set[str]) -> None:
    from playwright.sync_api import sync_playwright

    with running_app(Path(runs_dir)) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#start-btn")
        wait_until(lambda: page.evaluate(REWARD_POINTS_JS) > 0, timeout=60)
        time.sleep(1)
        if "train" in only:  # the first screen: the action bar (Start, the status) over the settings and plots
            page.screenshot(path=str(ROOT / "docs" / "train-tab.png"), full_page=True, clip=TRAIN_CLIP)
            small(ROOT / "docs" / "train-tab.png")
        page.get_by_role("tab", name="Rollouts").click()
        page.wait_for_selector("#rollout-groups table.rloo-table tbody tr", timeout=120_000)
        page.locator("#group-table [role=gridcell]").first.click()
        page.wait_for_function("document.querySelector('#arithmetic').innerText.includes('baseline = mean')")
        time.sleep(1)
        if "rollouts" in only:  # the primer, the run picker, the groups and the selected completion's arithmetic
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(ROOT / "docs" / "rollouts-tab.png"), full_page=True, clip=ROLLOUTS_CLIP)
            small(ROOT / "docs" / "rollouts-tab.png")
        if "tokens" in only:
            tokens_view(page, controller)
        browser.close()


SHOTS = ("train", "rollouts", "tokens")  # docs/train-tab.png, docs/rollouts-tab.png, docs/tokens-tab.png
TRAIN_CLIP = {"x": 0, "y": 0, "width": 1400, "height": 1600}  # the first screen and the first plots
ROLLOUTS_CLIP = {"x": 0, "y": 0, "width": 1400, "height": 1700}  # down to the arithmetic, not the panels below


def small(path: Path) -> None:
    """The screenshot in 256 colours (a few hundred kB less; the page's flat colours lose nothing visible)."""
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def tokens_view(page, controller) -> None:
    """docs/tokens-tab.png: the completion of the shown group with the largest advantage, coloured by Δ log π,
    beside the batch's KL heatmap (most tokens of a reinforced completion should be green)."""
    from rloo_demo.ui.views import group_rows

    name = controller.default_run()
    group = controller.rollouts(name, 0)[0]  # the tab shows the latest step's first group
    best = max(range(len(group["completions"])), key=lambda i: group["completions"][i]["advantage"])
    columns = len(group_rows(group)[0])
    page.locator("#group-table [role=gridcell]").nth(best * columns).click()
    page.wait_for_selector("#token-view span.rloo-tok", timeout=120_000)
    time.sleep(1)
    page.locator("#tokens-section").screenshot(path=str(ROOT / "docs" / "tokens-tab.png"))
    small(ROOT / "docs" / "tokens-tab.png")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="re-take the README screenshots from a finished run")
    parser.add_argument("runs_dir", nargs="?", default="runs", help="runs folder; the newest run is photographed")
    parser.add_argument("--only", nargs="+", choices=SHOTS, default=list(SHOTS), help="which screenshots to take")
    args = parser.parse_args()
    main(args.runs_dir, set(args.only))
