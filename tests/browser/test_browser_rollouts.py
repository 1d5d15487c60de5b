"""The Rollouts tab in a real browser, at a desktop's 1440x900 and a phone's 390x844: the
primer in the first screen, the run picker and the Runs tab's rows opening a run (its content checked against that
run's folder), a group whose advantages print ±0.000 drawn grey, and, during a live run, a selected completion
that stays the one the outlined rows, the arithmetic and the token view name while new steps arrive.

``python -m pytest tests/browser/test_browser_rollouts.py`` (a few minutes; needs /usr/bin/chromium).
"""

import json
import os
import re
import threading

import pytest
from apputil import CHROMIUM, CHROMIUM_FLAGS, running_app, wait_until
from conftest import ARTIFACTS

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
HEAD = re.compile(r"Completion #(\d+) of prompt (\d+) \(step (\d+)\)")
GREY = "rgba(128, 128, 128, 0.1)"  # tr.rloo-zero in the app's stylesheet

# [completion text, background colour, printed advantage] of every row of the tab's groups tables (a number cell's
# value: on a phone it shows under its column's name)
ROWS_JS = """() => [...document.querySelectorAll('#rollout-groups table.rloo-table tbody tr')].map(r => {
  const last = r.cells[r.cells.length - 1];
  return [r.cells[1].innerText.trim(), getComputedStyle(r).backgroundColor,
          (last.querySelector('.rloo-val') || last).innerText.trim()]; })"""
# the outlined row of the groups tables: [prompt group, #, text]
MARKED_JS = """() => [...document.querySelectorAll('#rollout-groups tr[data-selected]')].map(r =>
  [r.closest('.rloo-group').dataset.group, r.cells[0].innerText.trim(), r.cells[1].innerText.trim()])"""
# the side table's highlighted row (gradio marks the clicked cell): its cells' texts
HIGHLIGHTED_JS = """() => { const c = document.querySelector('#group-table [role=gridcell][aria-selected=true]');
  return c ? [...c.closest('[role=row]').querySelectorAll('[role=gridcell]')].map(x => x.innerText.trim()) : null; }"""
ARITHMETIC = "document.querySelector('#arithmetic').innerText"
STATUS_JS = "() => { const e = document.querySelector('#run-status'); return e && /step \\d+/.test(e.innerText); }"
BOX_JS = """(sel) => { const e = document.querySelector(sel); if (!e) return null; const r = e.getBoundingClientRect();
  return [r.top, r.bottom, r.height, window.innerHeight]; }"""


def squash(text: str) -> str:
    return " ".join(text.split())


def last_step_texts(folder, name) -> list[str]:
    """The completion texts of a run's newest step, in the order the tab lists them, read from its folder."""
    groups = [json.loads(line) for line in (folder / name / "rollouts.jsonl").read_text().splitlines()]
    last = max(g["step"] for g in groups)
    return [squash(c["text"]) for g in groups if g["step"] == last for c in g["completions"]]


def write_runs(folder) -> None:
    """Two finished runs by hand: 'older' (2 steps) and 'newer' (3 steps); each step's second group has advantages
    that print ±0.000."""
    from factories import group

    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder

    for name, steps in (("older", 2), ("newer", 3)):
        run = RunFolder.create(RunConfig(output_dir=str(folder), run_name=name))
        for step in range(1, steps + 1):
            tiny = [0.0004, -0.0001, -0.0003, 0.0]
            run.append_rollouts(step, [group(step, 0, [0.2, -0.1, 0.3, -0.4], name), group(step, 1, tiny, name)])
        run.set_status("finished")


def shown_texts(page) -> list[str]:
    return [squash(text) for text, _, _ in page.evaluate(ROWS_JS)]


def open_rollouts(page) -> None:
    page.locator("button[role=tab][data-tab-id=rollouts]").first.click()
    page.wait_for_selector("#rollout-groups table.rloo-table tbody tr", timeout=60_000)


@pytest.mark.slow
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_primer_picker_runs_rows_and_zero_advantages(tmp_path, viewport):
    from playwright.sync_api import sync_playwright

    write_runs(tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    width, height = VIEWPORTS[viewport]
    with running_app(tmp_path) as (url, controller), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url)
        open_rollouts(page)
        # the primer: its heading and first lines in the first screen of the tab
        primer = page.locator("#rollouts-primer-summary strong").first
        assert primer.inner_text().startswith("How RLOO turns rewards into updates")
        top, bottom, _, inner = page.evaluate(BOX_JS, "#rollouts-primer-summary strong")
        assert 0 <= top and bottom <= inner, (top, bottom, inner)

        # the newest run by default, as its folder has it
        wait_until(lambda: shown_texts(page) == last_step_texts(tmp_path, "newer"), timeout=30)
        # a printed ±0.000 is grey, never green or red; the other rows are not grey
        for text, colour, printed in page.evaluate(ROWS_JS):
            zero = float(printed.replace("−", "-")) == 0
            assert (colour == GREY) == zero, (text, colour, printed)
        assert "this group teaches nothing" in page.inner_text("#rollout-groups")
        page.screenshot(path=str(ARTIFACTS / f"rollouts-primer-{viewport}.png"))

        # the picker: the runs newest first; choosing 'older' shows older's newest step and stops following
        page.locator("#rollout-run input").click()
        options = page.get_by_role("option")
        wait_until(lambda: options.count() == 2, timeout=15)
        assert [squash(t.replace("✓", "")) for t in options.all_inner_texts()] == ["newer", "older"]
        page.get_by_role("option", name="older", exact=True).click()
        wait_until(lambda: shown_texts(page) == last_step_texts(tmp_path, "older"), timeout=30)
        assert not page.locator("#rollout-follow input").is_checked()
        assert page.locator("#rollout-step input[type=number]").input_value() == "2"
        page.screenshot(path=str(ARTIFACTS / f"rollouts-picker-{viewport}.png"), full_page=True)

        # a row of the Runs table opens its run in Rollouts
        page.locator("button[role=tab][data-tab-id=runs]").first.click()
        cell = page.locator("#runs-table [role=gridcell]", has_text=re.compile(r"^\s*newer\s*$")).first
        cell.wait_for(timeout=30_000)
        cell.click()
        page.wait_for_selector("button[role=tab][data-tab-id=rollouts][aria-selected=true]", timeout=15_000)
        wait_until(lambda: shown_texts(page) == last_step_texts(tmp_path, "newer"), timeout=30)
        assert page.locator("#rollout-run input").input_value() == "newer"
        browser.close()


def step_of_status(page) -> int:
    match = re.search(r"step (\d+)", page.inner_text("#run-status"))
    return int(match.group(1)) if match else 0


def check_pinned(page, url, controller, name, viewport) -> None:
    """On one page, during the live run ``name``: click the third completion, let two steps arrive, and find
    the click still what every part of the tab names; then tick Follow and find the newest step, unselected."""
    page.goto(url)
    page.wait_for_function(STATUS_JS, timeout=120_000)
    open_rollouts(page)
    wait_until(lambda: len(controller.rollout_steps(name)) >= 2, timeout=300)
    assert page.locator("#rollout-follow input").is_checked()
    # the third completion of the group in the side table (a row has aria-colcount cells)
    columns = int(page.get_attribute("#group-table [role=grid]", "aria-colcount"))
    page.locator("#group-table [role=gridcell]").nth(2 * columns + 1).click()
    page.wait_for_function(f"() => /Completion #3/.test({ARITHMETIC})", timeout=30_000)
    head = HEAD.search(page.inner_text("#arithmetic"))
    step = int(head.group(3))
    # steps arrive, and the page's ticks see them (its status line counts them)
    wait_until(lambda: step_of_status(page) >= step + 2, timeout=300)
    wait_until(lambda: HEAD.search(page.inner_text("#token-view")) is not None, timeout=30)
    assert not page.locator("#rollout-follow input").is_checked()
    assert page.locator("#rollout-step input[type=number]").input_value() == str(step)
    assert HEAD.search(page.inner_text("#arithmetic")).groups() == head.groups()
    assert HEAD.search(page.inner_text("#token-view")).groups() == head.groups()
    # the completion as the run recorded it at that step: the outlined row and the side table's
    # highlighted row are that one
    prompt = int(head.group(2))
    recorded = next(g for g in controller.rollouts(name, step) if g["group"] == prompt - 1)
    text = squash(recorded["completions"][2]["text"]) or "(empty)"
    assert page.evaluate(MARKED_JS) == [[str(prompt), "3", text]]
    highlighted = page.evaluate(HIGHLIGHTED_JS)
    assert highlighted[0] == "3" and text.startswith(squash(highlighted[1]).rstrip("…")), highlighted
    page.screenshot(path=str(ARTIFACTS / f"rollouts-pinned-{viewport}.png"), full_page=True)

    # ticked again: back to the newest step, nothing selected
    page.locator("#rollout-follow input").check()
    wait_until(lambda: int(page.locator("#rollout-step input[type=number]").input_value()) > step, 60)
    wait_until(lambda: "Select a row above" in page.inner_text("#arithmetic"), timeout=30)
    assert page.evaluate(MARKED_JS) == []


@pytest.mark.slow
def test_a_selection_stays_pinned_while_steps_arrive(tmp_path):
    from playwright.sync_api import sync_playwright

    from rloo_demo.public.gates import Caller

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(tmp_path) as (url, controller), sync_playwright() as p:
        settings = {"max_steps": 400, "prompts_per_step": 2, "max_new_tokens": 8, "num_generations": 4}
        name = controller.start(settings, Caller("browser-test", "127.0.0.1"))
        done = threading.Event()

        def heartbeat():  # its starter is here: not an abandoned run
            while not done.wait(0.5):
                controller.runner.heartbeat(owner="browser-test")

        threading.Thread(target=heartbeat, daemon=True).start()
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            for viewport, (width, height) in VIEWPORTS.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                check_pinned(page, url, controller, name, viewport)
                page.close()
        finally:
            done.set()
            for active in controller.runner.active():
                active.job.stop()
            browser.close()
