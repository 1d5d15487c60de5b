"""The page on a phone (390x844) in a real browser, in English, Russian and Georgian: on every tab no label is
broken inside a word (nor cut at its box's edge), slider labels sit above their controls, the Runs table scrolls
sideways with its first column (header and body) in place, an empty plot's note stays inside the plot, and plotly's
toolbar shows only while the pointer is on a plot. The same
label check at a desktop's 1440x900. Screenshots of every tab go to ``artifacts/``.

``python -m pytest tests/browser/test_browser_phone.py`` (about two minutes; needs /usr/bin/chromium and a font with
Georgian script, ``fonts-noto-core``).
"""

import json
import os

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, open_page, running_app, show_tab, wait_until
from conftest import ARTIFACTS

from rloo_demo.i18n import load

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
PHONE, DESKTOP = (390, 844), (1440, 900)
TABS = ("train", "rollouts", "compare", "runs")

# Every visible label-like text (labels, tab and other buttons, accordion titles, table headers), each word checked:
# its line boxes (Range.getClientRects) must share one top (a word broken over two lines has two), and it must lie
# inside its box (a word wider than a narrow column overflows and is cut). Words are split at spaces and hyphens,
# where a line may break ("leave-one-⏎out"); only words with a letter count (not "▼" or "↺").
BROKEN_WORDS_JS = """() => {
  const out = [];
  const sel = '[data-testid="block-info"], label span, button, [role=tab], .label-wrap span, th';
  for (const el of document.querySelectorAll(sel)) {
    if (!el.offsetParent || el.closest('footer')) continue;
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height) continue;
    const clip = el.closest('.block, button, th, td');
    const edge = clip ? clip.getBoundingClientRect() : null;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const re = /[^\\s\\-‐]*\\p{L}[^\\s\\-‐]*/gu;
      let m;
      while ((m = re.exec(n.data))) {
        const range = document.createRange();
        range.setStart(n, m.index);
        range.setEnd(n, m.index + m[0].length);
        const rects = [...range.getClientRects()].filter((q) => q.width > 0);
        if (!rects.length) continue;
        if (new Set(rects.map((q) => Math.round(q.top))).size > 1) out.push(`broken: ${m[0]} in "${el.innerText}"`);
        const last = rects[rects.length - 1];
        if (edge && (last.right > edge.right + 1 || rects[0].left < edge.left - 1))
          out.push(`cut: ${m[0]} in "${el.innerText}"`);
      }
    }
  }
  return [...new Set(out)];
}"""
# Each visible slider's label ends above its range input (beside it, the label was squeezed letter by letter)
SLIDER_LABELS_JS = """() => [...document.querySelectorAll('input[type=range]')].filter((r) => r.offsetParent)
  .map((r) => { const label = r.closest('.block').querySelector('[data-testid="block-info"]');
    return [label.innerText, label.getBoundingClientRect().bottom <= r.getBoundingClientRect().top + 1]; })"""
# The Runs table: its scroll box, scrolled to the far right, shows the last header and keeps the first in place; in
# the body (gradio's virtual rows, divs outside its <table>) each row's first cell, the run's name, stays where it
# was, in the box, while its last cell moves.
TABLE_SCROLL_JS = """() => {
  const table = document.querySelector('#runs-table table');
  let box = table.parentElement;
  while (box && box.scrollWidth <= box.clientWidth + 1) box = box.parentElement;
  if (!box || box.id === 'runs-table' && getComputedStyle(box).overflowX === 'hidden') return null;
  const heads = [...table.querySelectorAll('th')];
  const first = heads[0], last = heads[heads.length - 1];
  const before = first.getBoundingClientRect().left;
  const rows = [...document.querySelectorAll('#runs-table .virtual-row')].map((row) => [...row.children]);
  const left = (cell) => cell.getBoundingClientRect().left;
  const rowsBefore = rows.map((cells) => [left(cells[0]), left(cells[cells.length - 1])]);
  box.scrollLeft = box.scrollWidth;
  const frame = box.getBoundingClientRect(), r = last.getBoundingClientRect(), f = first.getBoundingClientRect();
  const body = rows.map((cells, i) => ({name: cells[0].innerText.trim(),
    kept: Math.abs(left(cells[0]) - rowsBefore[i][0]) <= 1 && left(cells[0]) >= frame.left - 1,
    moved: left(cells[cells.length - 1]) < rowsBefore[i][1] - 1}));
  return {scrolled: box.scrollLeft > 0, last_in_view: r.right <= frame.right + 1 && r.left >= frame.left - 1,
          first_kept: Math.abs(f.left - before) <= 1, last_hidden_by_first: r.left < f.right - 1, body};
}"""
# Each visible plot's notes (an empty plot's "no point yet", broken into lines) inside the plot's own box
NOTES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter((p) => p.offsetParent).flatMap((p) => {
  const frame = p.getBoundingClientRect();
  return [...p.querySelectorAll('.annotation-text')].map((a) => { const r = a.getBoundingClientRect();
    return [a.textContent, r.left >= frame.left - 1 && r.right <= frame.right + 1]; }); })"""
MODEBAR_JS = """() => { const m = document.querySelector('#reward-plot .modebar-container');
  return m ? Number(getComputedStyle(m).opacity) : null; }"""


def make_runs(root, count=3, steps=20):
    """Finished runs on disk (no training): the Runs table has rows and every column a value."""
    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder

    for i in range(count):
        run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"phone-run-{i:02d}"))
        records = ({"step": s, "max_steps": steps, "reward": 0.01 * s, "kl": 0.1} for s in range(1, steps + 1))
        lines = [json.dumps(r) for r in records]
        (run.path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        run.set_status("finished", created=1_000_000.0 + i)


@pytest.mark.slow
def test_every_tab_reads_on_a_phone_in_three_languages(tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    make_runs(tmp_path / "runs")
    with running_app(tmp_path / "runs") as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        problems = {}
        for locale in ("en", "ru", "ka"):
            for name, size in (("phone", PHONE), ("desktop", DESKTOP)):
                context, page = open_page(browser, url, locale, size)
                for tab in TABS:
                    show_tab(page, locale, tab)
                    if tab == "runs":
                        wait_until(lambda page=page: "phone-run-00" in page.inner_text("#runs-table"), timeout=30)
                    page.screenshot(path=str(ARTIFACTS / f"{name}-{locale}-{tab}.png"), full_page=True)
                    broken = page.evaluate(BROKEN_WORDS_JS)
                    if broken:
                        problems[f"{name} {locale} {tab}"] = broken
                    if name == "phone":
                        squeezed = [label for label, above in page.evaluate(SLIDER_LABELS_JS) if not above]
                        assert not squeezed, f"{locale} {tab}: slider labels beside their controls: {squeezed}"
                    if name == "phone" and tab == "runs":
                        scroll = page.evaluate(TABLE_SCROLL_JS)
                        assert scroll is not None, f"{locale}: the Runs table does not scroll sideways"
                        assert scroll["scrolled"] and scroll["last_in_view"], (locale, scroll)
                        assert scroll["first_kept"] and not scroll["last_hidden_by_first"], (locale, scroll)
                        names = sorted(row["name"] for row in scroll["body"])
                        assert names == [f"phone-run-{i:02d}" for i in range(3)], (locale, scroll)  # make_runs'
                        assert all(row["kept"] and row["moved"] for row in scroll["body"]), (locale, scroll)
                        page.screenshot(path=str(ARTIFACTS / f"phone-{locale}-runs-scrolled.png"))
                context.close()
        assert not problems, json.dumps(problems, ensure_ascii=False, indent=1)
        browser.close()


@pytest.mark.slow
def test_the_empty_plots_notes_stay_inside_their_plots_on_a_phone_in_russian(tmp_path):
    """Before the first run every plot says that no run has started; in Russian, on one line, that ran past the plot."""
    from playwright.sync_api import sync_playwright

    (tmp_path / "runs").mkdir()
    with running_app(tmp_path / "runs") as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context, page = open_page(browser, url, "ru", PHONE)
        first = load("ru")["plot.no_run"].split()[0]
        wait_until(lambda: any(text.startswith(first) for text, _ in page.evaluate(NOTES_JS)), timeout=30)
        page.screenshot(path=str(ARTIFACTS / "phone-ru-empty-plots.png"), full_page=True)
        notes = page.evaluate(NOTES_JS)
        assert all(inside for _, inside in notes), notes
        context.close()
        browser.close()


@pytest.mark.slow
def test_the_plot_toolbar_shows_only_on_hover(tmp_path):
    from playwright.sync_api import sync_playwright

    with running_app(tmp_path / "runs") as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context, page = open_page(browser, url, "en", PHONE)
        page.wait_for_selector("#reward-plot .modebar-container", state="attached", timeout=30_000)
        page.mouse.move(0, 0)
        assert page.evaluate(MODEBAR_JS) == 0, "the plot's toolbar shows at rest, over the title"
        page.locator("#reward-plot .js-plotly-plot").hover()
        wait_until(lambda: page.evaluate(MODEBAR_JS) == 1, timeout=10)
        context.close()
        browser.close()
