"""The Compare and Evaluate tables in a real browser, at a desktop's 1440x900 and a phone's 390x844: each completion
text, the thing being compared, whole and inside its cell (nothing cut at the right edge); every number on one line;
headers broken only between words; Evaluate's report a table, not a text dump. And the Runs tab's rename, as a
person does it. Screenshots go to ``artifacts/``.

``python -m pytest tests/test_browser_tables.py`` (about a minute; needs /usr/bin/chromium).
"""

import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app, wait_until
from conftest import ARTIFACTS

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}

# Every table cell under `root` (an HTML table's, or a dataframe's grid cell): its text, whether it is cut (its
# content wider than its box, or its box past the right edge of the table's scroll box or the screen), how many
# lines its text takes, and whether a word of it is broken over two lines.
CELLS_JS = """(root) => {
  const box = document.querySelector(root);
  const lines = (el) => {
    const range = document.createRange(); range.selectNodeContents(el);
    return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size;
  };
  const brokenWord = (el) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) return m[0];
      }
    }
    return null;
  };
  const edge = Math.min(box.getBoundingClientRect().right, window.innerWidth) + 1;
  return [...box.querySelectorAll('td, th, [role=gridcell], [role=columnheader]')].map(el => {
    const r = el.getBoundingClientRect();
    return {text: el.innerText.trim(), header: el.matches('th, [role=columnheader]'), lines: lines(el),
            cut: el.scrollWidth > el.clientWidth + 1 || r.right > edge, broken: brokenWord(el),
            visible: r.width > 0 && r.height > 0};
  });
}"""
NUMBER = r"^[+\-−]?\d+(\.\d+)?$|^\[[^\]]+\]$"


def check_table(cells, where):
    """The assertions this file is about, on the cells of one table."""
    import re

    assert cells, f"{where}: no table cells"
    texts = [c for c in cells if not c["header"] and len(c["text"]) > 20]
    assert texts, f"{where}: no completion text in a cell"
    for c in texts:
        assert c["visible"] and not c["cut"], f"{where}: text cut: {c}"
    for c in cells:
        if not c["header"] and re.match(NUMBER, c["text"]):
            assert c["lines"] == 1, f"{where}: a number on {c['lines']} lines: {c}"
        if c["header"]:
            assert c["broken"] is None, f"{where}: header broken inside a word: {c}"


@pytest.mark.slow
def test_compare_and_evaluate_tables_read_at_both_widths(tmp_path):
    from playwright.sync_api import sync_playwright

    from rloo_demo.server.gates import Caller

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(tmp_path / "runs") as (url, controller), sync_playwright() as p:
        settings = {"max_steps": 2, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 8}
        name = controller.start(settings, Caller("tester"))
        controller.runner.get_active(name).job.join(120)
        wait_until(lambda: controller.runner.get_active(name) is None, timeout=60)
        controller.label_run(name, "a short run", "made by the table test", Caller("tester"))
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        for view, (width, height) in VIEWPORTS.items():
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url)
            page.wait_for_selector("#start-btn", timeout=60_000)
            page.get_by_role("tab", name="Compare").click()
            # the picker: the newest run, shown with its label
            page.wait_for_function(
                "n => document.querySelector('#compare-run input').value.includes(n)", arg=name, timeout=30_000
            )
            assert "a short run" in page.input_value("#compare-run input")
            page.fill("#compare-prompt textarea", "I watched this film last night and honestly the acting was")
            page.click("#sample-btn")
            wait_until(lambda page=page: len(page.evaluate(CELLS_JS, "#trained-samples")) > 4, timeout=90)
            page.locator("#trained-samples").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"tables-compare-{view}.png"), full_page=True)
            for side in ("#base-samples", "#trained-samples"):
                cells = page.evaluate(CELLS_JS, side)
                check_table(cells, f"{view} {side}")
                headers = [c["text"] for c in cells if c["header"]]
                # one reward function: its score is the reward, one column, not two equal ones
                assert sum("vader_compound" in h for h in headers) == 1, headers

            page.click("#evaluate-btn")
            page.wait_for_selector("#eval-report table", timeout=120_000)
            page.locator("#eval-report").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"tables-evaluate-{view}.png"), full_page=True)
            assert page.locator("#eval-report pre").count() == 0
            cells = page.evaluate(CELLS_JS, "#eval-report")
            check_table(cells, f"{view} evaluate")
            headers = [c["text"] for c in cells if c["header"]]
            assert headers[:4] == ["measure", "base", "trained", "trained − base"], headers
            assert all(not c["cut"] for c in cells), [c for c in cells if c["cut"]]
            page.close()

        # the Runs tab: its table carries each run's name, and a rename shows beside it
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(url)
        page.wait_for_selector("#start-btn", timeout=60_000)
        page.get_by_role("tab", name="Runs").click()
        page.wait_for_function(
            "n => document.querySelector('#runs-table').innerText.includes(n)", arg=name, timeout=60_000
        )
        assert "a short run" in page.inner_text("#runs-table")
        page.get_by_text("Rename, note or delete this run").click()
        # the picked run's stored note comes into its box (the save below sends what the boxes hold)
        page.wait_for_function(
            "() => (document.querySelector('#run-note textarea') || {}).value === 'made by the table test'",
            timeout=60_000,
        )
        page.fill("#run-label textarea, #run-label input", "renamed in the browser")
        page.click("#run-save")
        page.wait_for_function(
            "() => document.querySelector('#runs-table').innerText.includes('renamed in the browser')",
            timeout=60_000,
        )
        page.screenshot(path=str(ARTIFACTS / "tables-runs.png"), full_page=True)
        assert "made by the table test" in page.inner_text("#runs-table")
        assert controller.run_notes(name) == {"label": "renamed in the browser", "note": "made by the table test"}
        browser.close()
