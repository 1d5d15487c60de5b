"""Every table of every tab in a real browser, at a desktop's 1440x900 and a phone's 390x844, in English and
Georgian: every number on one line, headers broken only between words (an identifier may break after its
underscore or hyphen), nothing past the screen's right edge, and on a phone the Rollouts groups as cards (each
completion's advantage in sight) and the wide tables scrolling sideways under their first column. The tables: the
Train tab's run summary; the Rollouts groups, the side table, the what-if table, the token table and the exact toy's
table; Compare's two sides and Evaluate's report; the Runs table and the arena's. With them, what the walk of the
page found beside the tables: a row's colour as strong as its |A| against its group's largest, a click on a row of
the groups tables selecting that completion, the side table printing its numbers as the groups tables do, the run
pickers showing their labels whole, the arena's models said once, the config viewer numbering every line of a
50-line config, and the download names whole. Then the pinned action bar: one line on a phone (120 px at most, with
a warning), opened by a tap, and nothing of the page painted over it at either size. Last, the Runs tab's rename, as
a person does it. Screenshots go to ``artifacts/``.

The runs are written on disk by hand (no training): one finished run with a model (the embedded policy), rollouts,
token records, a collapse warning, a label and a 50-line config; three failed runs with long errors and notes; an
arena's summary; a run to rename.

``python -m pytest tests/browser/test_browser_tables.py`` (about two minutes; needs /usr/bin/chromium and a font with
Georgian script, ``fonts-noto-core``).
"""

import json
import os
import re

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, open_page, running_app, show_tab, wait_until
from conftest import ARTIFACTS
from factories import finished_run, records

from rloo_demo.arena import models_text
from rloo_demo.i18n import load, t

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
LOCALES = ("en", "ka")
RUN = "20260101-120000-tiny-imdb-gpt2-k4-b0.05"  # a default run name's length (store.folder.default_run_name)
LABEL = "K=4, β=0.05, three rewards"
WEIGHTS = {"vader_compound": 1.0, "sentiment_classifier": 0.5, "length_penalty": 0.1}
STEPS = (28, 29, 30)
# each group's shaped rewards: the second group's second completion gets an advantage of -0.001, beside a largest
# |A| near 0.84, the row the walk saw painted full pink
SHAPED = ([0.45432, -0.3121, 0.2, -0.5], [0.6, 0.397 / 3, 0.3, -0.5])
TEXTS = [
    " a truly good movie, and the acting was wonderful from start to end, I loved every minute of it",
    " boring and far too long; the plot went nowhere",
    "",
    " an amazing film!!! amazing amazing amazing",
]
MODELS = {
    "policy": 1_350_400,
    "reference": {"kind": "separate copy", "parameters": 1_350_400},
    "rewards": [{"name": "vader_compound", "kind": "lexicon", "parameters": 0}],
}
CONFIG_LINES = 50

# Every table cell under `root` (an HTML table's, a dataframe's grid cell, or a card's caption): its text (a card
# cell's number, not its caption), whether it is a header, whether it is cut (its content wider than its box, or its
# box past the right edge of the table's box or the screen), how many lines its text takes (the rows its text's
# boxes make), and the first word of it broken over two lines (a word may break after its underscore, hyphen or
# slash: "sentiment_⏎classifier").
CELLS_JS = """(root) => {
  const box = document.querySelector(root);
  if (!box) return [];
  const lines = (el) => {  // the rows its text's boxes make, boxes that overlap in height sharing a row
    const rects = [], walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const range = document.createRange(); range.selectNodeContents(node);
      rects.push(...[...range.getClientRects()].filter(r => r.width > 0));
    }
    rects.sort((a, b) => a.top - b.top);
    let rows = 0, bottom = -Infinity;
    for (const r of rects) { if (r.top >= bottom - 1) rows += 1; bottom = Math.max(bottom, r.bottom); }
    return rows;
  };
  const brokenWord = (el) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[^\\s_\\-‐\\/]+[_\\-‐\\/]*/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) return m[0];
      }
    }
    return null;
  };
  const edge = Math.min(box.getBoundingClientRect().right, window.innerWidth) + 1;
  const sel = 'td, th, [role=gridcell], [role=columnheader], .rloo-cap';
  return [...box.querySelectorAll(sel)].map(el => {
    const value = el.matches('.rloo-cap') ? el : (el.querySelector('.rloo-val') || el);
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    return {text: value.innerText.trim(), header: el.matches('th, [role=columnheader], .rloo-cap'),
            lines: lines(value), cut: el.scrollWidth > el.clientWidth + 1 || r.right > edge,
            broken: brokenWord(value),
            visible: r.width > 0 && r.height > 0 && style.visibility !== 'hidden' && style.display !== 'none'};
  });
}"""
# a cell of digits and the marks numbers are written with (signs, a point, a comma, a slash, brackets, ×, %, an
# exponent): "+0.454", "62.7×", "3/3", "+0.571 [+0.473, +0.681]", "1e-05"
NUMBER = re.compile(r"^[\d\s.,+\-−×%/\[\]()?–e]*\d[\d\s.,+\-−×%/\[\]()?–e]*$")
# The groups tables' rows: [group, #, background colour, printed advantage]
ROWS_JS = """() => [...document.querySelectorAll('#rollout-groups tbody tr')].map(r => [
  Number(r.closest('.rloo-group').dataset.group), Number(r.cells[0].innerText.trim()),
  getComputedStyle(r).backgroundColor, r.cells[r.cells.length - 1].innerText.trim()])"""
# Each advantage cell of the groups tables: its box inside the screen and inside its table's scroll box
ADVANTAGES_JS = """() => [...document.querySelectorAll('#rollout-groups tbody tr')].map(row => {
  const c = row.querySelector('td.rloo-adv') || row.cells[row.cells.length - 1];
  const r = c.getBoundingClientRect();
  const box = (c.closest('.rloo-table-box') || c.closest('#rollout-groups')).getBoundingClientRect();
  return r.width > 0 && r.left >= Math.max(0, box.left) - 1 && r.right <= Math.min(window.innerWidth, box.right) + 1;
})"""
# the number cells of one group's rows, as the groups table prints them, and the side table's rows
GROUP_NUMBERS_JS = """(n) => [...document.querySelectorAll(`#rollout-groups .rloo-group[data-group="${n}"] tbody tr`)]
  .map(r => [...r.cells].slice(2).map(c => (c.querySelector('.rloo-val') || c).innerText.trim()))"""
SIDE_ROWS_JS = """() => [...document.querySelectorAll('#group-table [role=row]')].map(r =>
  [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim())).filter(r => r.length)"""
# a dropdown's shown text and whether its input cuts it
INPUT_JS = """(sel) => { const i = document.querySelector(sel + ' input');
  return {value: i.value, cut: i.scrollWidth > i.clientWidth + 1}; }"""
OPTIONS_JS = """() => [...document.querySelectorAll('li[role=option]')].filter(li => li.offsetParent)
  .map(li => ({text: li.innerText.replace('✓', '').trim(), cut: li.scrollWidth > li.clientWidth + 1}))"""
# The config viewer's line numbers and lines (gradio's code viewer, or the page's own): each number, and whether it
# sits on its line's first row
CONFIG_JS = """() => {
  const box = document.querySelector('#run-config') || [...document.querySelectorAll('.block')]
    .find(b => b.querySelector('.cm-editor') && b.innerText.includes('config.yaml'));
  if (!box) return null;
  const numbers = [...box.querySelectorAll('.rloo-cfg-no, .cm-gutterElement')].filter(n => n.innerText.trim());
  const lines = [...box.querySelectorAll('.rloo-cfg-text, .cm-line')];
  return numbers.map((n, i) => [n.innerText.trim(), !!lines[i] && n.getBoundingClientRect().height > 0 &&
    Math.abs(n.getBoundingClientRect().top - lines[i].getBoundingClientRect().top) <= 2]);
}"""
# Each download's name: the whole name shown (the cell's text against its aria-label), nothing cut
DOWNLOADS_JS = """() => [...document.querySelectorAll('#runs-downloads td.filename')].map(td => {
  const cut = (e) => !!e && e.scrollWidth > e.clientWidth + 1, s = getComputedStyle(td.querySelector('.stem'));
  return {name: td.getAttribute('aria-label'), shown: td.innerText.replace(/\\s+/g, ''),
          cut: cut(td) || cut(td.querySelector('.stem')) || s.textOverflow === 'ellipsis' && s.overflow === 'hidden'};
})"""
# The Runs table's headers: each one's [text, left, right] and the table's scroll box's [left, right]
RUNS_HEADERS_JS = """() => { const heads = [...document.querySelectorAll('#runs-table th')];
  const box = document.querySelector('#runs-table .table-wrap').getBoundingClientRect();
  return {heads: heads.map(h => { const r = h.getBoundingClientRect(); return [h.innerText.trim(), r.left, r.right]; }),
          box: [box.left, Math.min(box.right, window.innerWidth)]}; }"""
TWO_FRAMES_JS = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


# Each table under `root` (an HTML table, or a dataframe's scroll box): its right edge, and the box that holds it,
# the nearest one that scrolls sideways (or the root): that box's right edge and whether it scrolls
BOXES_JS = """(root) => [...document.querySelectorAll(`${root} table, ${root} .table-wrap`)].filter(t => t.offsetParent)
  .filter(t => !t.closest('.table-wrap') || t.matches('.table-wrap')).map(t => {
    let box = t.parentElement;
    while (box && !box.matches(root) && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
      box = box.parentElement;
    if (t.matches('.table-wrap')) box = t;
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)
      || ['auto', 'scroll'].includes(getComputedStyle(t).overflowX);
    return {table: t.getBoundingClientRect().right, box: box.getBoundingClientRect().right, scrolls,
            screen: window.innerWidth};
  })"""


def check_boxes(page, root, where):
    """No table past the screen's right edge or its box's (into the next column): each fits its box, or scrolls
    sideways in it, and the box fits the screen."""
    boxes = page.evaluate(BOXES_JS, root)
    assert boxes, f"{where}: no table"
    for b in boxes:
        assert b["box"] <= b["screen"] + 1 and (b["scrolls"] or b["table"] <= b["box"] + 1), (where, b)


def check_table(cells, where, texts=False):
    """The assertions this file is about, on the cells of one table: some cells shown; each number on one line; no
    header broken inside a word; with ``texts``, each long text (a completion) whole in its cell."""
    shown = [c for c in cells if c["visible"]]
    assert shown, f"{where}: no table cells"
    if texts:
        long = [c for c in shown if not c["header"] and len(c["text"]) > 20]
        assert long, f"{where}: no completion text in a cell"
        for c in long:
            assert not c["cut"], f"{where}: text cut: {c}"
    for c in shown:
        if not c["header"] and NUMBER.match(c["text"]):
            assert c["lines"] == 1, f"{where}: a number on {c['lines']} lines: {c}"
        if c["header"]:
            assert c["broken"] is None, f"{where}: header broken inside a word: {c}"


# ----------------------------------------------------------------------------- the runs on disk


def completion(text, shaped, baseline, i):
    tokens = text.split() or ["<|endoftext|>"]
    n = len(tokens)
    return {
        "text": text,
        "num_tokens": n,
        "scores": {"vader_compound": 0.9 * shaped, "sentiment_classifier": shaped - 0.4541, "length_penalty": -0.0081},
        "weighted_reward": shaped + 0.0117,
        "kl": 0.2345,
        "kl_k2": 0.0312,
        "kl_k3": 0.0298,
        "kl_penalty": -0.0117,
        "shaped_reward": shaped,
        "baseline": baseline,
        "raw_advantage": shaped - baseline,
        "advantage": shaped - baseline,
        "token_texts": [f" {w}" for w in tokens],
        "token_logp": [-2.5 - 0.1 * j for j in range(n)],
        "token_logp_after": [-2.4 - 0.1 * j - 0.01 * i for j in range(n)],
        "token_ref_logp": [-2.6 - 0.1 * j for j in range(n)],
        "token_entropy": [3.1 + 0.05 * j for j in range(n)],
    }


def group(step, index):
    shaped = SHAPED[index]
    k = len(shaped)
    comps = [
        completion(TEXTS[(i + index) % len(TEXTS)], r, (sum(shaped) - r) / (k - 1), i) for i, r in enumerate(shaped)
    ]
    return {
        "step": step,
        "group": index,
        "prompt": f"I watched this film last night ({index + 1}) and",
        "k": k,
        "beta": 0.05,
        "normalize_advantages": False,
        "weights": WEIGHTS,
        "completions": comps,
    }


def write_runs(root):
    """The runs the tables show (the module docstring)."""
    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder
    from rloo_demo.store.labels import write_notes

    for i in range(3):
        run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"failed-run-with-a-long-name-{i}"))
        run.append_metrics({"step": 1, "reward": -0.123456, "kl": 0.0123})
        run.set_status("failed", error="RuntimeError: out of memory while allocating a tensor of shape (64, 1024)")
        write_notes(run, label=f"label number {i}", note="a longer note on what this run tried, and why it failed")
    rename = RunFolder.create(RunConfig(output_dir=str(root), run_name="rename-me"))
    rename.append_metrics({"step": 1, "reward": 0.1})
    rename.set_status("finished", step=1, created=1_500_000_000.0)
    write_notes(rename, note="made by the table test")

    run = finished_run(root, RUN)
    metrics = [r | {"max_steps": 30} for r in records(30, collapse_from=21)]  # a collapse warning from step 24
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    for step in STEPS:
        run.append_rollouts(step, [group(step, 0), group(step, 1)])
    config = (run.path / "config.yaml").read_text().splitlines()
    config += [f"# note {i}: kept with the run" for i in range(CONFIG_LINES - len(config))]
    (run.path / "config.yaml").write_text("\n".join(config) + "\n")
    write_notes(run, label=LABEL)
    run.set_status("finished", step=30, created=2_000_000_000.0)  # the newest: the page watches it

    rows = [
        {
            "estimator": name,
            "runs": 3,
            "seeds": [0, 1, 2],
            "gain": 0.5712 - 0.1 * j,
            "gain_ci95": [0.4731, 0.6812],
            "kl_to_base": 12.34,
            "distinct_2": 0.8123,
            "repetition": 0.0512,
            "collapsed": j,
            "step_seconds": 0.3812,
            "peak_rss_mb": 912.3,
            "models": MODELS,
        }
        for j, name in enumerate(("rloo", "grpo", "reinforce"))
    ]
    arena = {"name": "arena-20260101-120000", "settings": "Arena 20260101-120000: 3 estimators x 3 seeds, 150 steps."}
    (root / "arena-20260101-120000.json").write_text(json.dumps(arena | {"rows": rows, "runs": []}))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The app on the runs above, and a browser, for the whole module."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    root = tmp_path_factory.mktemp("tables") / "runs"
    root.mkdir()
    write_runs(root)
    with running_app(root) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield url, controller, browser
        browser.close()


def pages(site, locale):
    """A fresh page per size, in ``locale``: (size's name, page), closed after."""
    url, _, browser = site
    for view, size in VIEWPORTS.items():
        context, page = open_page(browser, url, locale, size)
        try:
            yield view, page
        finally:
            context.close()


def expected_alphas() -> dict:
    """(group, #) -> the alpha a row's colour should have: 0.35·|A|/max|A| of its group, computed here; None for a
    row printed ±0.000, drawn grey."""
    out = {}
    for index in range(len(SHAPED)):
        advantages = [c["advantage"] for c in group(30, index)["completions"]]
        largest = max(abs(a) for a in advantages)
        for i, a in enumerate(advantages, 1):
            out[(index + 1, i)] = None if f"{round(a, 4):+.3f}" in ("+0.000", "-0.000") else 0.35 * abs(a) / largest
    return out


def alpha(colour: str) -> float:
    """The alpha of a computed 'rgba(r, g, b, a)' colour (1 for 'rgb(...)')."""
    numbers = re.findall(r"[\d.]+", colour)
    return float(numbers[3]) if len(numbers) == 4 else 1.0


# ----------------------------------------------------------------------------- the tabs


@pytest.mark.slow
@pytest.mark.parametrize("locale", LOCALES)
def test_the_rollouts_tables_read_select_and_colour_by_the_advantage(site, locale):
    expected = expected_alphas()
    for view, page in pages(site, locale):
        show_tab(page, locale, "rollouts")
        page.wait_for_selector("#rollout-groups tbody tr", timeout=60_000)
        page.wait_for_selector("#whatif table", timeout=60_000)
        page.locator("#toy-panel").get_by_text(load(locale)["toy.accordion"]).click()
        page.wait_for_selector("#toy-table table", timeout=60_000)
        where = f"{view} {locale}"

        # a row's colour: its sign's, as strong as its |A| against the group's largest
        rows = page.evaluate(ROWS_JS)
        assert len(rows) == 8, rows
        for g, i, colour, printed in rows:
            want = expected[(g, i)]
            if want is None:
                assert colour == "rgba(128, 128, 128, 0.1)", (g, i, colour, printed)
            else:
                # the browser keeps an alpha in 8 bits
                assert alpha(colour) == pytest.approx(want, abs=1 / 255), (g, i, colour, printed, want)
        # the advantage of every row in sight: a card's on a phone, the table's last column on a desktop
        assert all(page.evaluate(ADVANTAGES_JS)), f"{where}: an advantage off the screen or its box"

        # a click on a row of the left tables selects that completion: the arithmetic, the outline, the side table
        page.locator("#rollout-groups .rloo-group[data-group='2'] tbody tr").nth(2).click()
        head = t(locale, "arith.head", index=3, group=2, step=30).replace("*", "")
        page.wait_for_function(
            "h => document.querySelector('#arithmetic').innerText.includes(h)", arg=head, timeout=30_000
        )
        page.wait_for_selector("#rollout-groups .rloo-group[data-group='2'] tr[data-selected]", timeout=30_000)
        marked = page.locator("#rollout-groups tr[data-selected]")
        assert marked.count() == 1 and marked.get_attribute("data-pick") == "30:1:2"
        # ... and the side table shows that group, its numbers printed as the groups table prints them
        wait_until(lambda page=page: len(page.evaluate(SIDE_ROWS_JS)) == 4, timeout=30)
        wait_until(
            lambda page=page: [r[2:] for r in page.evaluate(SIDE_ROWS_JS)] == page.evaluate(GROUP_NUMBERS_JS, 2),
            timeout=30,
        )
        page.click("#token-view summary")  # the token table, folded under the token view
        page.wait_for_selector("#token-view table", timeout=30_000)

        page.screenshot(path=str(ARTIFACTS / f"tables-rollouts-{view}-{locale}.png"), full_page=True)
        for root in ("#rollout-groups", "#group-table", "#whatif", "#toy-table", "#token-view"):
            check_table(page.evaluate(CELLS_JS, root), f"{where} {root}", texts=root == "#rollout-groups")
            check_boxes(page, root, f"{where} {root}")

        # the run picker: its label and name whole on a desktop, and every choice whole in its list
        shown = page.evaluate(INPUT_JS, "#rollout-run")
        assert shown["value"] == f"{LABEL} · {RUN}"
        if view == "desktop":
            assert not shown["cut"], shown
        page.click("#rollout-run input")
        wait_until(lambda page=page: page.evaluate(OPTIONS_JS), timeout=10)
        options = page.evaluate(OPTIONS_JS)
        assert f"{LABEL} · {RUN}" in [o["text"] for o in options] and not any(o["cut"] for o in options), options
        page.keyboard.press("Escape")


@pytest.mark.slow
@pytest.mark.parametrize("locale", LOCALES)
def test_compare_and_evaluate_tables_read_at_both_sizes(site, locale):
    for view, page in pages(site, locale):
        show_tab(page, locale, "compare")
        # the picker: the run with a model, shown with its label
        page.wait_for_function(
            "n => document.querySelector('#compare-run input').value.includes(n)", arg=RUN, timeout=30_000
        )
        shown = page.evaluate(INPUT_JS, "#compare-run")
        assert LABEL in shown["value"] and (view == "phone" or not shown["cut"]), shown
        page.fill("#compare-prompt textarea", "I watched this film last night and honestly the acting was")
        page.click("#sample-btn")
        wait_until(lambda page=page: len(page.evaluate(CELLS_JS, "#trained-samples")) > 4, timeout=90)
        for side in ("#base-samples", "#trained-samples"):
            cells = page.evaluate(CELLS_JS, side)
            check_table(cells, f"{view} {locale} {side}", texts=True)
            check_boxes(page, side, f"{view} {locale} {side}")
            headers = [c["text"] for c in cells if c["header"]]
            # one reward function: its score is the reward, one column, not two equal ones
            assert sum("vader_compound" in h for h in headers) == 1, headers

        # 8 held-out prompts, the slider's least (its number box, as a person types it)
        prompts = page.locator(".block", has_text=load(locale)["compare.eval_prompts"]).locator("input[type=number]")
        prompts.fill("8")
        prompts.press("Enter")
        page.click("#evaluate-btn")
        page.wait_for_selector("#eval-report table", timeout=120_000)
        page.locator("#eval-report").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"tables-compare-{view}-{locale}.png"), full_page=True)
        assert page.locator("#eval-report pre").count() == 0
        cells = page.evaluate(CELLS_JS, "#eval-report")
        check_table(cells, f"{view} {locale} evaluate", texts=True)
        check_boxes(page, "#eval-report", f"{view} {locale} evaluate")
        if locale == "en":
            headers = [c["text"] for c in cells if c["header"]]
            assert headers[:4] == ["measure", "base", "trained", "trained − base"], headers
        assert all(not c["cut"] for c in cells), (view, locale, [c for c in cells if c["cut"]])
        assert "8" in page.inner_text("#eval-report caption")


@pytest.mark.slow
@pytest.mark.parametrize("locale", LOCALES)
def test_the_runs_and_arena_tables_the_config_and_the_downloads_read(site, locale):
    for view, page in pages(site, locale):
        show_tab(page, locale, "runs")
        page.wait_for_function(
            "n => document.querySelector('#runs-table').innerText.includes(n)", arg="failed-run", timeout=60_000
        )
        page.wait_for_selector("#runs-downloads td.filename", timeout=60_000)
        page.wait_for_function(TWO_FRAMES_JS)
        # the config viewer numbers every line, seen whole before anything scrolls it into view
        numbers = page.evaluate(CONFIG_JS)
        assert numbers is not None, "no config viewer"
        assert [n for n, _ in numbers] == [str(i) for i in range(1, CONFIG_LINES + 1)], numbers
        assert all(on_its_line for _, on_its_line in numbers), numbers
        page.get_by_text(load(locale)["runs.arena_accordion"]).click()
        page.wait_for_selector("#arena-table table", timeout=60_000)
        page.wait_for_function(TWO_FRAMES_JS)
        page.screenshot(path=str(ARTIFACTS / f"tables-runs-{view}-{locale}.png"), full_page=True)
        where = f"{view} {locale}"
        for root in ("#runs-table", "#arena-table"):
            check_table(page.evaluate(CELLS_JS, root), f"{where} {root}")
            check_boxes(page, root, f"{where} {root}")

        # the arena's models: one text for all three estimators, said once
        assert page.inner_text("#arena-table").count(models_text(MODELS)) == 1

        # the Runs table: on a desktop every column inside its box; on a phone the run, its label and status in
        # sight beside the pinned first column
        heads = page.evaluate(RUNS_HEADERS_JS)
        left, right = heads["box"]
        inside = [h[0] for h in heads["heads"] if h[1] >= left - 1 and h[2] <= right + 1]
        if view == "desktop":
            assert len(inside) == len(heads["heads"]) == 10, heads
        else:
            assert len(inside) >= 3, heads

        # the downloads: each file's whole name
        downloads = page.evaluate(DOWNLOADS_JS)
        assert {d["name"] for d in downloads} >= {f"{RUN}-config.yaml", f"{RUN}-metrics.csv"}, downloads
        for d in downloads:
            assert d["shown"] == d["name"] and not d["cut"], d

        # the run picker of the details: its label and name whole on a desktop, every choice whole in its list
        shown = page.evaluate(INPUT_JS, "#runs-detail")
        assert shown["value"] == f"{LABEL} · {RUN}" and (view == "phone" or not shown["cut"]), shown
        page.click("#runs-detail input")
        wait_until(lambda page=page: page.evaluate(OPTIONS_JS), timeout=10)
        options = page.evaluate(OPTIONS_JS)
        assert "label number 2 · failed-run-with-a-long-name-2" in [o["text"] for o in options], options
        assert not any(o["cut"] for o in options), options
        page.keyboard.press("Escape")


# ----------------------------------------------------------------------------- the Train tab: its action bar

# The action bar's box (the outer of gradio's two boxes with its id), and what paints on top at points over it:
# each point's topmost element, unless it is inside the bar
BAR_JS = """() => { const bars = [...document.querySelectorAll('[id="action-bar"]')];
  const bar = bars.find(b => !b.parentElement.closest('#action-bar'));
  const r = bar.getBoundingClientRect(), out = [];
  for (const fx of [0.03, 0.2, 0.4, 0.6, 0.8, 0.97]) for (const fy of [0.1, 0.5, 0.9]) {
    const x = r.left + fx * r.width, y = r.top + fy * r.height;
    if (y < 0 || y >= window.innerHeight) continue;
    const e = document.elementFromPoint(x, y);
    if (e && !e.closest('#action-bar')) out.push(`${e.tagName}.${e.className}: ${(e.innerText || '').slice(0, 30)}`);
  }
  return {top: r.top, height: r.height, over: out}; }"""
CALLOUT_JS = """() => { const c = document.querySelector('#train-alerts .rloo-callout');
  return !!c && c.getBoundingClientRect().height > 0; }"""
MARK_JS = """() => { const s = getComputedStyle(document.querySelector('.rloo-bar-toggle'), '::before');
  return [s.content, s.color]; }"""


@pytest.mark.slow
@pytest.mark.parametrize("locale", LOCALES)
def test_the_train_tab_its_pinned_bar_one_line_on_a_phone_nothing_over_it_and_its_summary_table(site, locale):
    for view, page in pages(site, locale):
        page.wait_for_selector("#train-alerts .rloo-callout", state="attached", timeout=60_000)  # the run's warning
        page.wait_for_selector("#run-summary table", timeout=60_000)
        page.wait_for_function(TWO_FRAMES_JS)
        page.screenshot(path=str(ARTIFACTS / f"tables-train-{view}-{locale}.png"), full_page=True)
        check_table(page.evaluate(CELLS_JS, "#run-summary"), f"{view} {locale} run summary")
        check_boxes(page, "#run-summary", f"{view} {locale} run summary")
        bar = page.evaluate(BAR_JS)
        page.screenshot(path=str(ARTIFACTS / f"bar-{view}-{locale}.png"))
        if view == "phone":
            assert bar["height"] <= 120, f"{locale}: the pinned bar is {bar['height']} px tall with a warning"
            assert not page.evaluate(CALLOUT_JS)
            # the folded warning marks the bar's button, in the warning's colour (a run's error would be red)
            assert page.evaluate(MARK_JS) == ['"⚠ "', "rgb(196, 127, 23)"]
        else:
            assert page.evaluate(CALLOUT_JS), "a desktop shows the warning in the bar"
        # scrolled, the bar stays at the top and the page's labels, plots and tables pass under it
        over = {}
        for y in range(150, 2400, 150):
            page.evaluate("y => window.scrollTo(0, y)", y)
            page.wait_for_function(TWO_FRAMES_JS)
            state = page.evaluate(BAR_JS)
            assert abs(state["top"] - max(0, bar["top"] - y)) <= 1, (view, y, bar, state)  # pinned once it is reached
            if state["over"]:
                over[y] = state["over"]
            if y == 600:
                page.screenshot(path=str(ARTIFACTS / f"bar-{view}-{locale}-scrolled.png"))
        assert not over, f"{view} {locale}: painted over the pinned bar: {over}"
        if view == "phone":  # a tap opens it, with the warning; another folds it again
            page.click(".rloo-bar-toggle")
            page.wait_for_function(CALLOUT_JS, timeout=10_000)
            assert page.get_attribute(".rloo-bar-toggle", "aria-expanded") == "true"
            page.screenshot(path=str(ARTIFACTS / f"bar-{view}-{locale}-open.png"))
            page.click(".rloo-bar-toggle")
            page.wait_for_function(f"() => !({CALLOUT_JS})()", timeout=10_000)
            page.click("#run-status")  # the status line opens it too
            page.wait_for_function(CALLOUT_JS, timeout=10_000)


# ----------------------------------------------------------------------------- the rename


@pytest.mark.slow
def test_a_run_is_renamed_from_the_runs_tab(site):
    url, controller, browser = site
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(url)
    page.wait_for_selector("#start-btn", timeout=60_000)
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function(
        "n => document.querySelector('#runs-table').innerText.includes(n)", arg="rename-me", timeout=60_000
    )
    page.click("#runs-detail input")
    page.get_by_role("option", name="rename-me", exact=True).click()
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
    page.screenshot(path=str(ARTIFACTS / "tables-runs-renamed.png"), full_page=True)
    assert "made by the table test" in page.inner_text("#runs-table")
    assert controller.run_notes("rename-me") == {"label": "renamed in the browser", "note": "made by the table test"}
    page.close()


@pytest.mark.slow
@pytest.mark.parametrize("locale", LOCALES)
def test_the_lessons_table_and_figure_read_at_both_sizes(site, locale):
    """The Lessons tab, reached from the tab bar at both sizes: its figure drawn, its table's numbers on one line and
    nothing past the screen's edge (the wide table scrolls in its own box on a phone)."""
    from rloo_demo.ui.views.lessons import LESSONS, read

    rows = len(read(LESSONS[0])["rows"])
    for view, page in pages(site, locale):
        show_tab(page, locale, "lessons")
        page.wait_for_selector("#lesson-trajectory-plot .js-plotly-plot", timeout=60_000)
        page.wait_for_function(TWO_FRAMES_JS)
        page.screenshot(path=str(ARTIFACTS / f"tables-lessons-{view}-{locale}.png"), full_page=True)
        cells = page.evaluate(CELLS_JS, "#lesson-trajectory-table")
        assert len(cells) == 5 * (rows + 1), len(cells)  # the estimator and four numbers a row, and the headers
        check_table(cells, f"{view} {locale} #lesson-trajectory-table")
        check_boxes(page, "#lesson-trajectory-table", f"{view} {locale} #lesson-trajectory-table")
