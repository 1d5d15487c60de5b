"""The page as gradio serves it (``demo.get_config_file()``, what every browser receives), value for value, for
a local and a public server: every component's type, label, default, bounds, choices, element id and visibility,
the layout, and every event with its trigger, inputs, outputs, API name and queue settings.

The tabs' handlers have their own tests (test_page_followups, test_ui_handlers, test_controller, ...), each
against a value it works out; this file is the net under the page's declarations, which only a browser would
otherwise read: a slider's changed bound, a renamed element id the CSS and the browser tests select, an event wired
to the wrong output, a label key mistyped. After a deliberate change, read the diff of the rewritten file:
``UPDATE_GOLDEN=1 pytest tests/ui/test_page_golden.py`` rewrites ``tests/golden/page.json`` and checks nothing.
"""

import json
import os
from pathlib import Path

import gradio.context
import pytest
from gradio.i18n import I18nData

from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server.runner import Runner
from rloo_demo.ui.app import build_app, prepare
from rloo_demo.ui.controller import Controller

GOLDEN = Path(__file__).parent.parent / "golden" / "page.json"
# What differs from build to build, or is gradio's own and not the page's: the app's random id and version, the
# browser state's random secret, gradio's class hashes and API descriptions, and the translation table (tests/
# test_i18n*.py check it) that would make up most of the file.
NOISE_TOP = {"app_id", "version", "i18n_translations", "theme_hash", "page"}  # "page": the ids again, listed
NOISE_COMPONENT = {"component_class_id", "api_info", "api_info_as_input", "api_info_as_output", "example_inputs"}


def page_config(root, limits) -> dict:
    controller = Controller(Runner(str(root), watchdog=False, limits=limits))
    try:
        demo = prepare(build_app(controller), limits)
        config = demo.get_config_file()
    finally:
        controller.close()
    config = {k: v for k, v in config.items() if k not in NOISE_TOP}
    for event in config["dependencies"]:
        # the function each event calls, by its name (config has only "backend_fn": whether there is one)
        block_fn = demo.fns[event["id"]]
        fn = block_fn.fn
        event["handler"] = getattr(fn, "__name__", type(fn).__name__) if fn is not None else None
        # the queue's settings, which config leaves out: which events share a queue and how many of them run at once
        # (Start one at a time, sampling one at a time across Compare, the probe and the API), and the handlers that
        # take raw values so that the controller, not gradio, checks them
        event["concurrency"] = {
            # an event without a queue of its own named is in one of its own, named by gradio with a memory address
            "concurrency_id": "(its own)" if block_fn.concurrency_id.isdigit() else block_fn.concurrency_id,
            "concurrency_limit": block_fn.concurrency_limit,
            "preprocess": block_fn.preprocess,
        }
    for component in config["components"]:
        for key in NOISE_COMPONENT:
            component.pop(key, None)
        if component["type"] == "browserstate":
            component["props"].pop("secret", None)
    # functions (a value gradio calls for each page) stand as their names
    return json.loads(json.dumps(config, sort_keys=True, default=_name))


def _name(value):
    """A label's translation key as the browser receives it; a function (a value gradio calls) as its name."""
    if isinstance(value, I18nData):
        return value.to_dict()
    return f"<{getattr(value, '__qualname__', type(value).__name__)}>"


def public_changes(local: dict, public: dict) -> dict:
    """The public page as what differs from the local one (the file would otherwise hold the page twice)."""
    changes = {k: v for k, v in public.items() if k not in ("components", "dependencies") and v != local.get(k)}
    ids = [c["id"] for c in public["components"]]
    if ids != [c["id"] for c in local["components"]]:
        changes["component ids"] = ids
    was = {c["id"]: c for c in local["components"]}
    changes["components"] = [c for c in public["components"] if c != was.get(c["id"])]
    changes["dependencies"] = [e for e, w in zip(public["dependencies"], local["dependencies"], strict=False) if e != w]
    changes["dependencies"] += public["dependencies"][len(local["dependencies"]) :]
    changes["number of dependencies"] = len(public["dependencies"])
    return changes


def dump(pages: dict) -> str:
    """JSON with one line per component and per event, so that a diff of the file reads as what changed."""

    def one(value):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    out = []
    for name, page in sorted(pages.items()):
        fields = []
        for key, value in sorted(page.items()):
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                rows = ",\n".join(f"   {one(v)}" for v in value)
                fields.append(f"  {one(key)}: [\n{rows}\n  ]")
            else:
                fields.append(f"  {one(key)}: {one(value)}")
        out.append(f" {one(name)}: {{\n" + ",\n".join(fields) + "\n }")
    return "{\n" + ",\n".join(out) + "\n}\n"


@pytest.fixture()
def pages(tmp_path, monkeypatch):
    """Both pages, each numbered from 0 (gradio numbers blocks from one counter for the whole process)."""
    built = {}
    for name, limits in (("local", LOCAL), ("public", PUBLIC)):
        monkeypatch.setattr(gradio.context.Context, "id", 0)
        (tmp_path / name).mkdir()
        built[name] = page_config(tmp_path / name, limits)
    return built


def differences(pages: dict, golden: dict) -> list[str]:
    """What changed against the golden file, one line per component or event, so that a failure names it."""
    local, out = golden["local"], []
    if public_changes(pages["local"], pages["public"]) != golden["public"]:
        out.append("the public page's changes changed")
    if sorted(pages["local"]) != sorted(local):
        out.append(f"local page: its keys changed: {sorted(pages['local'])}")
    for key, value in pages["local"].items():
        if key not in ("components", "dependencies") and value != local.get(key):
            out.append(f"local page: {key} changed")
    want = {c["id"]: c for c in local["components"]}
    if [c["id"] for c in pages["local"]["components"]] != list(want):
        out.append("local page: its components changed")
    for component in pages["local"]["components"]:
        if component != want.get(component["id"]):
            where = component["props"].get("elem_id") or component["type"]
            out.append(f"local page: component {component['id']} ({where}) changed")
    if len(pages["local"]["dependencies"]) != len(local["dependencies"]):
        out.append("local page: its events changed")
    for event, was in zip(pages["local"]["dependencies"], local["dependencies"], strict=False):
        if event != was:
            out.append(f"local page: event {event['id']} ({event['api_name']}) changed")
    return out


@pytest.fixture()
def changed(pages):
    """The differences, worked out before the test's own call: mutmut runs a mutant's tests shortest call first,
    and this test, which kills nearly every mutant of the tabs' builders, then runs before the tests that build a
    page in their fixtures only to call one handler (their calls are shorter than a comparison of the page)."""
    if os.environ.get("UPDATE_GOLDEN"):  # rewrite the file and compare nothing: a file is not checked against itself
        GOLDEN.write_text(dump({"local": pages["local"], "public": public_changes(pages["local"], pages["public"])}))
        return None
    return differences(pages, json.loads(GOLDEN.read_text()))


def test_the_page_is_what_the_golden_file_holds(changed):
    if changed is None:
        pytest.skip(f"UPDATE_GOLDEN: rewrote {GOLDEN.name}; look at the diff, then run again")
    assert changed == []


def test_a_changed_page_is_told_apart_from_the_golden_one(pages):
    """The comparison sees a change of one prop, one event's output and the public page's difference."""
    golden = json.loads(GOLDEN.read_text())
    assert differences(pages, golden) == []
    moved = json.loads(json.dumps(pages))
    slider = next(c for c in moved["local"]["components"] if c["props"].get("elem_id") == "k-input")
    slider["props"]["maximum"] = slider["props"].get("maximum", 0) + 1
    moved["local"]["dependencies"][3]["outputs"] = moved["local"]["dependencies"][3]["outputs"][:-1]
    moved["public"]["components"][0]["props"]["visible"] = "changed"
    found = differences(moved, golden)
    assert found[0] == "the public page's changes changed" and len(found) == 3
    assert found[1].startswith(f"local page: component {slider['id']} (k-input)")
    assert found[2].startswith("local page: event 3 ")


def test_the_golden_page_is_the_one_the_app_serves(pages):
    """What the file holds is the real page, not an empty one: the ids the browser tests select are in it, each
    event's inputs and outputs are components of the page, and the public page differs where the limits do."""
    for page in pages.values():
        ids = {c["props"].get("elem_id") for c in page["components"]}
        assert {"app-header", "start-btn", "k-input", "reward-plot"} <= ids
        known = {c["id"] for c in page["components"]}
        assert page["dependencies"] and all(set(e["inputs"]) | set(e["outputs"]) <= known for e in page["dependencies"])
    changes = public_changes(pages["local"], pages["public"])
    assert changes["components"] or changes["dependencies"] or len(changes) > 3  # the public page is not the local one
