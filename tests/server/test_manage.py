"""Renaming, noting and deleting runs (the Runs tab, ``server.manage``), and the Compare tab's picker, tables and
Evaluate report, through the controller and the page's own handlers.

What is checked: a label and note read back from disk by a new Runner and Controller (a restart); a delete that
removes exactly that run's folder; refusals in public mode for another visitor's run, for a training run, and for
hostile names, with nothing on disk changed; Compare's tables without the duplicate score column, with the
completion whole; Evaluate's report as a table of the result's own figures.

``python -m pytest tests/server/test_manage.py`` (a few seconds).
"""

import html
import json
import os
import re

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import Busy, InputError, NotFound, NotOwner
from rloo_demo.public.gates import Caller, owner_digest
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import MAX_LABEL_CHARS, MAX_NOTE_CHARS
from rloo_demo.store.process import process_identity
from rloo_demo.ui.controller import Controller


def make_run(root, name, owner=None, status="finished", **extra):
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name))
    if owner is not None:
        extra["owner"] = owner_digest(owner)
    run.set_status(status, **extra)
    run.append_metrics({"step": 1, "max_steps": 3, "reward": 0.25, "kl": 0.0})
    return run


def tree(root) -> dict[str, bytes]:
    """Every file under ``root`` with its content: what 'nothing else changed' is compared against."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            path = os.path.join(folder, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def controller_for(root, limits=LOCAL) -> Controller:
    return Controller(Runner(str(root), watchdog=False, limits=limits))


def page_of(controller) -> tuple[dict, dict]:
    """The page built on ``controller``: its handlers by API name and its components by element id."""
    from rloo_demo.ui.app import build_app

    demo = build_app(controller)
    handler = {fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name}
    component = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    return handler, component


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    make_run(root, "older", owner="alice")
    make_run(root, "newer", owner="bob")
    return root


# ----------------------------------------------------------------------------- labels and notes


def test_a_label_and_note_survive_a_restart_and_show_in_the_listing(runs):
    controller = controller_for(runs)
    assert {r["name"]: r["label"] for r in controller.list_runs()} == {"newer": "", "older": ""}  # listed before
    stored = controller.label_run("older", "  β = 0 baseline\n", "first try;\nK = 4", Caller("anyone"))
    assert stored == {"label": "β = 0 baseline", "note": "first try;\nK = 4"}
    on_disk = json.loads((runs / "older" / "notes.json").read_text(encoding="utf-8"))
    assert (on_disk["label"], on_disk["note"]) == (stored["label"], stored["note"])
    controller.close()

    restarted = controller_for(runs)  # a new Runner and Controller over the same folder: a server restart
    listed = {r["name"]: r for r in restarted.list_runs()}
    assert (listed["older"]["label"], listed["older"]["note"]) == ("β = 0 baseline", "first try;\nK = 4")
    assert (listed["newer"]["label"], listed["newer"]["note"]) == ("", "")
    assert restarted.run_notes("older") == stored
    # None keeps a field, an empty text clears it
    assert restarted.label_run("older", None, "", Caller("x")) == {"label": "β = 0 baseline", "note": ""}
    assert {r["name"]: r["note"] for r in restarted.list_runs()}["older"] == ""  # the cached listing saw it
    restarted.close()


def test_the_runs_table_shows_the_run_id_then_its_label(runs):
    from rloo_demo.ui.views import run_headers, run_rows

    controller = controller_for(runs)
    controller.label_run("older", "mine", "n" * 100, Caller("x"))
    rows = {row[0]: row for row in run_rows(controller.list_runs())}
    assert run_headers()[:2] == ["run", "name"] and run_headers()[-2:] == ["note", "error"]
    assert rows["older"][:3] == ["older", "mine", "finished"] and rows["newer"][1] == ""
    assert rows["older"][-2] == "n" * 79 + "…"
    controller.close()


def test_a_label_past_its_limit_or_not_a_text_is_refused_and_nothing_written(runs):
    controller = controller_for(runs)
    before = tree(runs)
    for label, note, says in (
        ("x" * (MAX_LABEL_CHARS + 1), None, f"at most {MAX_LABEL_CHARS}"),
        (None, "y" * (MAX_NOTE_CHARS + 1), f"at most {MAX_NOTE_CHARS:,}"),
        ("\ud800", None, "lone surrogate"),
        (5, None, "must be a text"),
        (None, ["a"], "must be a text"),
    ):
        with pytest.raises(InputError, match=says):
            controller.label_run("older", label, note, Caller("x"))
    assert tree(runs) == before
    controller.close()


# ----------------------------------------------------------------------------- deleting


def test_delete_removes_exactly_that_runs_folder(runs):
    make_run(runs, "third")
    (runs.parent / "outside.txt").write_text("keep")
    controller = controller_for(runs)
    controller.label_run("older", "to go", None, Caller("x"))
    before = tree(runs.parent)
    assert controller.delete_run("older", Caller("x")) == "older"
    after = tree(runs.parent)
    gone = {p for p in before if p.startswith(os.path.join("runs", "older") + os.sep)}
    assert gone and set(before) - set(after) == gone and {p: before[p] for p in after} == after
    assert sorted(os.listdir(runs)) == ["newer", "third"]  # no hidden leftover either
    assert [r["name"] for r in controller.list_runs()] == ["third", "newer"]
    with pytest.raises(NotFound):
        controller.delete_run("older", Caller("x"))
    controller.close()


# ----------------------------------------------------------------------------- who may


def test_public_mode_allows_only_the_visitors_own_runs(runs):
    controller = controller_for(runs, PUBLIC)
    make_run(runs, "operators")  # made by the CLI: no owner recorded
    before = tree(runs)
    for name in ("newer", "operators"):
        for action in (
            lambda n: controller.label_run(n, "hijack", None, Caller("alice", "1.2.3.4")),
            lambda n: controller.delete_run(n, Caller("alice", "1.2.3.4")),
            lambda n: controller.delete_run(n, Caller("", "1.2.3.4")),
        ):
            with pytest.raises(NotOwner, match="browser session that started it"):
                action(name)
    assert tree(runs) == before
    assert controller.label_run("older", "alice's", None, Caller("alice", "1.2.3.4"))["label"] == "alice's"
    assert controller.may_manage("older", Caller("alice")) and not controller.may_manage("newer", Caller("alice"))
    assert controller.delete_run("older", Caller("alice", "5.6.7.8")) == "older"  # the id, not the address
    assert sorted(os.listdir(runs)) == ["newer", "operators"]
    controller.close()


def test_the_operators_token_may_manage_any_run_in_public_mode(runs):
    from dataclasses import replace

    controller = controller_for(runs, replace(PUBLIC, admin_token="s3cret-token"))
    assert controller.label_run("newer", "ops", None, Caller("s3cret-token"))["label"] == "ops"
    with pytest.raises(NotOwner):
        controller.label_run("newer", "ops", None, Caller("s3cret-toke"))
    controller.close()


@pytest.mark.parametrize("limits", [LOCAL, PUBLIC], ids=["local", "public"])
def test_a_training_run_is_never_renamed_or_deleted(runs, limits):
    # training in another process (the CLI) or this one: its status is 'running' with a live process
    make_run(runs, "training", owner="alice", status="running", **process_identity())
    controller = controller_for(runs, limits)
    before = tree(runs)
    for action in (
        lambda: controller.delete_run("training", Caller("alice")),
        lambda: controller.label_run("training", "x", "y", Caller("alice")),
    ):
        with pytest.raises(Busy, match="is training"):
            action()
    assert tree(runs) == before
    assert not controller.may_manage("training", Caller("alice"))
    controller.close()


HOSTILE = ["../x", "..", ".", "", "/etc", "older/../../x", "x/..", "older\x00", "\ud800", None, 5, ["older"], "a" * 101]


# ids of plain characters: a backslash in one (repr of "\x00") is not found again when mutmut reselects the test
@pytest.mark.parametrize("name", HOSTILE, ids=lambda v: re.sub(r"[^\w./-]", "_", repr(v), flags=re.ASCII))
def test_hostile_run_names_are_refused_without_touching_the_disk(tmp_path, runs, name, monkeypatch):
    make_run(tmp_path, "x")  # a run folder beside the runs folder: what "../x" would reach
    controller = controller_for(runs)
    before = tree(tmp_path)

    def no_disk(*args, **kwargs):
        raise AssertionError("the disk was read for a name that is not a run's")

    monkeypatch.setattr(RunFolder, "status", no_disk)
    for action in (
        lambda: controller.delete_run(name, Caller("me")),
        lambda: controller.label_run(name, "x", "y", Caller("me")),
        lambda: controller.run_notes(name),
    ):
        with pytest.raises((NotFound, InputError)):
            action()
    assert tree(tmp_path) == before
    controller.close()


def test_the_page_handlers_rename_and_delete_and_refuse_a_training_run(runs):
    """The Runs tab's own events (what a click, or a direct call with any values, runs): save shows the new name in
    the table, delete removes the row, a training run's refusal is said, not raised."""
    make_run(runs, "training", status="running", **process_identity())
    controller = controller_for(runs)
    handler, component = page_of(controller)

    out = handler["runs_label"]("me", "older", "renamed", "a note", [], "en")
    rows = {row[0]: row for row in out[component["runs-table"]].value["data"]}
    assert rows["older"][1] == "renamed" and rows["older"][-2] == "a note"
    assert "Saved" in out[component["runs-manage-message"]]
    assert controller_for(runs).run_notes("older") == {"label": "renamed", "note": "a note"}  # on disk

    out = handler["runs_delete"]("me", "training", [], "en")
    assert "is training" in out[component["runs-manage-message"]] and (runs / "training").is_dir()
    out = handler["runs_delete"]("me", "../older", [], "en")
    assert "no such run" in out[component["runs-manage-message"]] and (runs / "older").is_dir()
    out = handler["runs_delete"]("me", "older", [], "en")
    assert {row[0] for row in out[component["runs-table"]].value["data"]} == {"newer", "training"}
    assert not (runs / "older").exists() and "Deleted older" in out[component["runs-manage-message"]]
    controller.close()


def test_delete_asks_first_naming_the_run_in_the_pages_language_and_cancel_takes_the_question_back(runs):
    """Delete only asks (the confirm and cancel buttons appear, the question names the run); with no run picked it
    says so and shows no buttons; cancel hides them and clears the question. Nothing is deleted by either."""
    from rloo_demo import i18n

    controller = controller_for(runs)
    handler, component = page_of(controller)
    message, confirm, cancel = (
        component[k] for k in ("runs-manage-message", "run-delete-confirm", "run-delete-cancel")
    )

    def shown(out):
        return out[message], out[confirm].visible, out[cancel].visible

    assert shown(handler["ask"]("older", "ru")) == (i18n.t("ru", "runs.confirm_text", name="older"), True, True)
    assert "older" in i18n.t("ru", "runs.confirm_text", name="older") != i18n.t("en", "runs.confirm_text", name="x")
    for nothing in ("", None):
        assert shown(handler["ask"](nothing, "ru")) == (i18n.t("ru", "runs.pick_first"), False, False)
    assert i18n.t("ru", "runs.pick_first") != i18n.t("en", "runs.pick_first")
    assert shown(handler["ask"]("newer")) == (i18n.t("en", "runs.confirm_text", name="newer"), True, True)
    assert shown(handler["lambda"]()) == ("", False, False)
    assert (runs / "older").is_dir() and (runs / "newer").is_dir()
    controller.close()


# ----------------------------------------------------------------------------- Compare: picker, tables, report


def test_a_held_out_prompt_picked_in_compare_fills_the_prompt_box_and_anything_else_clears_it(runs):
    controller = controller_for(runs)
    try:
        pick = page_of(controller)[0]["compare_heldout"]
        assert pick("The film was") == "The film was" and pick("") == ""
        for not_text in (None, 3, ["The film was"], {"p": 1}):  # a direct call with any value
            assert pick(not_text) == ""
    finally:
        controller.close()


def test_compare_picker_defaults_to_the_newest_run_and_shows_labels(runs):
    from rloo_demo.ui.app import build_app

    for name in ("older", "newer"):
        (runs / name / "model").mkdir()
        (runs / name / "model" / "config.json").write_text("{}")
    controller = controller_for(runs)
    controller.label_run("older", "my baseline", None, Caller("x"))
    demo = build_app(controller)
    refresh = next(fn.fn for fn in demo.fns.values() if fn.api_name == "compare_refresh")
    picker = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "compare-run")
    out = refresh("older", None, "en")  # the page watches the older run; nothing picked yet
    assert out[picker].value == "newer"
    assert out[picker].choices == [("newer", "newer"), ("my baseline · older", "older")]
    assert refresh(None, "older", "en")[picker].value == "older"  # a pick stays
    controller.close()


def cells(markup: str, tag: str = "td") -> list[str]:
    return [html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", markup, re.S)]


def test_compare_table_merges_the_score_equal_to_the_reward_and_keeps_the_text_whole():
    from rloo_demo.ui.views.compare import compare_html, compare_table

    long = "a wonderful <b>film</b> " * 40
    one = [
        {"text": long, "reward": 0.5, "scores": {"vader_compound": 0.5}},
        {"text": "", "reward": -0.25, "scores": {"vader_compound": -0.25}},
    ]
    headers, rows = compare_table(one)
    assert headers == ["reward (vader_compound)", "completion"] and rows == [[0.5, long], [-0.25, ""]]
    markup = compare_html(one, "Base policy")
    assert cells(markup, "th") == ["#", "reward (vader_compound)"]  # the completion: a row of its own, under
    assert cells(markup) == ["1", "+0.500", long, "2", "-0.250", "(empty)"]  # escaped, whole
    assert "<b>film" not in markup and "class='rloo-num'>+0.500" in markup
    two = [{"text": "t", "reward": 0.75, "scores": {"vader_compound": 0.5, "length_penalty": 0.25}}]
    assert compare_table(two)[0] == ["reward", "vader_compound", "length_penalty", "completion"]


def test_evaluate_report_is_a_table_of_the_results_figures():
    from rloo_demo.ui.views.compare import eval_report_html

    result = {
        "base_mean_reward": 0.0812,
        "trained_mean_reward": 0.6434,
        "difference": 0.5622,
        "difference_ci95": [0.4711, 0.6801],
        "num_prompts": 64,
        "samples_per_prompt": 2,
        "seed": 7,
        "trained_on": ["vader_compound"],
        "heldout_scorers": ["sentiment_classifier"],
        "per_function": {
            "vader_compound": {"base": 0.0812, "trained": 0.6434},
            "sentiment_classifier": {"base": 0.41, "trained": 0.72},
        },
        "kl_trained_vs_base": 3.25,
        "judges": {
            "base": {"distinct_2": 0.91, "repetition": 0.02, "base_perplexity": 61.5},
            "trained": {"distinct_2": 0.85, "repetition": 0.05, "base_perplexity": 90.25},
        },
        "samples": [{"prompt": "This movie", "base": "was <dull>", "trained": "was great!"}],
    }
    markup = eval_report_html(result)
    assert "<pre>" not in markup and "=" not in cells(markup)[0]
    assert cells(markup, "th")[:4] == ["measure", "base", "trained", "trained − base"]
    body = cells(markup)
    rows = [body[i : i + 4] for i in range(0, 12, 4)] + [body[12:14]] + [body[i : i + 4] for i in range(14, 26, 4)]
    r = result
    assert rows[0] == ["mean reward (vader_compound)", "+0.081", "+0.643", f"{r['difference']:+.3f}"]
    assert rows[1] == ["vader_compound (trained on)", "+0.081", "+0.643", f"{0.6434 - 0.0812:+.3f}"]
    assert rows[2] == ["sentiment_classifier (held-out scorer)", "+0.410", "+0.720", f"{0.72 - 0.41:+.3f}"]
    assert rows[3] == ["95% bootstrap interval of the difference", "[+0.471, +0.680]"]
    assert rows[4] == ["KL of trained to base (nats per completion)", "", "3.250", ""]
    assert rows[5][1:3] == ["0.910", "0.850"] and rows[6][1:3] == ["0.020", "0.050"]
    assert body[27:29] == ["61.5", "90.2"]
    assert "64 held-out prompts × 2 samples, seed 7" in markup
    assert body[-5:] == ["prompt: This movie…", "base", "was <dull>", "trained", "was great!"]
    assert "<dull>" not in markup


# ----------------------------------------------------------------------------- whose client id counts


def test_only_a_plain_client_id_of_at_most_200_characters_owns_its_runs(tmp_path):
    """The owner check in public mode: a client id that is no text, empty, over 200 characters or not valid
    Unicode owns nothing, even where the run records its hash; one of exactly 200 characters is an id like any."""
    import hashlib

    root = tmp_path / "runs"
    root.mkdir()
    make_run(root, "two-hundred", owner="c" * 200)
    make_run(root, "too-long", owner="d" * 201)
    make_run(root, "empty")
    status = json.loads((root / "empty" / "status.json").read_text())
    status["owner"] = hashlib.sha256(b"rloo-demo:").hexdigest()[:32]  # what an empty client id would hash to
    (root / "empty" / "status.json").write_text(json.dumps(status))
    controller = controller_for(root, PUBLIC)
    try:
        assert controller.label_run("two-hundred", "mine", None, Caller("c" * 200))["label"] == "mine"
        before = tree(root)
        for name, client in (("too-long", "d" * 201), ("empty", ""), ("two-hundred", 5), ("two-hundred", "\ud800")):
            with pytest.raises(NotOwner, match="can be renamed or annotated only from the browser session"):
                controller.label_run(name, "hijack", None, Caller(client))
            assert not controller.may_manage(name, Caller(client))
        assert tree(root) == before
    finally:
        controller.close()


def test_a_refused_delete_says_it_is_a_delete(runs):
    make_run(runs, "training", owner="alice", status="running", **process_identity())
    controller = controller_for(runs, PUBLIC)
    try:
        with pytest.raises(Busy, match="run training is training: it cannot be deleted until it has finished"):
            controller.delete_run("training", Caller("alice"))
        with pytest.raises(NotOwner, match="a run can be deleted only from the browser session that started it; "):
            controller.delete_run("newer", Caller("alice"))
    finally:
        controller.close()


def test_the_limits_take_a_label_of_exactly_their_length_and_name_the_field_refused(runs):
    controller = controller_for(runs)
    try:
        label, note = "x" * MAX_LABEL_CHARS, "y" * MAX_NOTE_CHARS
        assert controller.label_run("older", label, note, Caller("x")) == {"label": label, "note": note}
        assert controller.label_run("older", None, None, Caller("x")) == {"label": label, "note": note}  # kept
        with pytest.raises(InputError, match="^the label must be a text$"):
            controller.label_run("older", 5, None, Caller("x"))
        with pytest.raises(InputError, match="^the note must be a text$"):
            controller.label_run("older", None, ["a"], Caller("x"))
        with pytest.raises(InputError, match=f"^the label is {MAX_LABEL_CHARS + 1} characters long; at most "):
            controller.label_run("older", label + "x", None, Caller("x"))
        with pytest.raises(InputError, match="^the note is not valid Unicode text"):
            controller.label_run("older", None, "\ud800", Caller("x"))
    finally:
        controller.close()


def test_a_run_training_in_this_process_is_not_changed_whatever_its_status_file_says(runs):
    from types import SimpleNamespace

    controller = controller_for(runs)
    try:
        # the runner holds it as training; its status.json still says finished (written before the run began)
        controller.runner._active["older"] = SimpleNamespace(job=SimpleNamespace(done=False))
        before = tree(runs)
        with pytest.raises(Busy, match="run older is training"):
            controller.label_run("older", "x", None, Caller("x"))
        with pytest.raises(Busy, match="run older is training"):
            controller.delete_run("older", Caller("x"))
        assert tree(runs) == before and controller.label_run("newer", "ok", None, Caller("x"))["label"] == "ok"
    finally:
        controller.runner._active.clear()
        controller.close()
