"""Small pieces of the page, each against what the test expects by hand: a refusal's lines, the labels a reward
problem is put under, gradio's per-session configs built on demand, an event's kind without an app, the tab labels
sent on a language switch, the arena picker's first choice and whole numbers from gradio's number boxes."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError
from rloo_demo.ui import gradio_internals as gi
from rloo_demo.ui import locale_switch, train_tab
from rloo_demo.ui.forms import config_from_form, defaults, field_label, form_settings, labelled_problems


class _Redacting:
    def redact(self, text):
        return text.replace("/srv/runs", "<runs>")

    def error_text(self, exc):
        return f"error: {exc}"


def test_a_refusal_is_one_line_per_field_under_its_label_in_the_pages_language_with_paths_redacted():
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "length_target:x"}
    problems = {"num_generations": "must be at least 2", "rewards": "unknown reward 'length_target:x' in /srv/runs"}
    text = train_tab.refusal_text(_Redacting(), ConfigError(problems), values, "ka")
    assert text == (f"- **{field_label('num_generations', 'ka')}**: must be at least 2\n"
                    f"- **{field_label('extra_reward', 'ka')}**: unknown reward &#x27;length_target:x&#x27; in <runs>")
    assert train_tab.refusal_text(_Redacting(), ValueError("x"), values, "ka") == "error: x"
    assert train_tab.refusal_text(_Redacting(), ConfigError(problems), "not a form", "ka") == (
        "error: " + str(ConfigError(problems)))


def test_a_reward_problem_is_put_under_the_box_its_message_quotes():
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "keyword:x", "reward_module": "a.py:f"}
    rows = labelled_problems({"rewards": "'module:a.py:f' is not allowed here"}, values, "ru")
    assert rows == [(field_label("reward_module", "ru"), "'module:a.py:f' is not allowed here")]


class _Source:
    def __init__(self, blocks):
        self.blocks, self.built = blocks, []

    def config_for_block(self, key, deps, block):
        self.built.append((key, list(deps) if deps is not None else None, block))
        return {"id": key, "of": block}


def test_per_session_configs_are_built_when_read_in_gradios_order_and_only_for_its_blocks():
    source = _Source({1: "b1", 2: "b2", 3: "b3"})
    configs = gi._LazyConfigs(source, [3, 1, 2, 9])  # 9: a key gradio lists that has no block now
    assert source.built == []
    assert 1 in configs and 9 in configs and 5 not in configs
    assert configs[1] == {"id": 1, "of": "b1"} and source.built == [(1, [], "b1")]
    assert configs[1] == {"id": 1, "of": "b1"} and len(source.built) == 1  # built once
    with pytest.raises(KeyError) as e:
        configs[5]
    assert e.value.args == (5,)
    configs[7] = {"id": 7}  # an event's update: stored as it is
    assert 7 in configs and configs[7] == {"id": 7}
    assert list(configs) == [3, 1, 2, 7] == configs.keys() and len(configs) == 4
    assert configs.items()[0] == (3, {"id": 3, "of": "b3"}) and configs.values()[-1] == {"id": 7}


def test_an_events_kind_needs_an_app_with_functions():
    assert gi.event_kind(None, 0, None) is None
    assert gi.event_kind(SimpleNamespace(get_blocks=lambda: SimpleNamespace()), 0, "compare") is None
    fns = {0: SimpleNamespace(api_name="compare", concurrency_id="sampling"),
           4: SimpleNamespace(api_name="tick", concurrency_id=12)}
    app = SimpleNamespace(get_blocks=lambda: SimpleNamespace(fns=fns))
    assert gi.event_kind(app, 4, "compare") == "12"  # by index first
    assert gi.event_kind(app, None, "compare") == "sampling" and gi.event_kind(app, None, "x") is None


def test_a_language_switch_sends_each_tab_its_own_label_key():
    tabs = {"train": gr.Tab("x", render=False), "compare": gr.Tab("y", render=False)}
    sent = locale_switch.tab_labels(tabs)
    assert list(sent) == [tabs["train"], tabs["compare"]]
    assert [update.label.key for update in sent.values()] == ["tab.train", "tab.compare"]


def test_whole_numbers_from_number_boxes_are_ints_and_other_values_pass_for_the_config_to_refuse():
    settings = form_settings(defaults() | {"num_generations": 6.0, "max_steps": 12.0, "seed": 2.5})
    assert type(settings["num_generations"]) is int and settings["num_generations"] == 6
    assert type(settings["max_steps"]) is int and settings["seed"] == 2.5
    config = config_from_form(defaults() | {"max_steps": 3.0})
    assert config.output_dir == "runs" == RunConfig().output_dir and config.max_steps == 3
    assert config_from_form(defaults(), "elsewhere").output_dir == "elsewhere"


def test_the_probe_is_about_the_run_shown_else_the_watched_one():
    from rloo_demo.ui.probe_panel import shown_run

    assert shown_run("shown", "watched") == "shown"
    assert [shown_run(x, "watched") for x in ("", None, 5, ["a"])] == ["watched"] * 4


def test_the_runs_table_words_its_rows_in_the_pages_language():
    from rloo_demo.ui.runs_tab import run_table
    from rloo_demo.ui.views.runs import run_headers, run_rows

    summaries = [{"name": "r1", "status": "finished", "steps": 10, "label": "", "note": "", "has_model": True}]
    table = run_table(summaries, "ka")
    assert table.value["data"] == run_rows(summaries, "ka") and table.value["headers"] == run_headers("ka")
    assert run_rows(summaries, "ka") != run_rows(summaries, "en")


def test_the_page_load_gives_each_tab_its_own_label_the_visitor_its_id_and_the_language_it_asked_for(tmp_path):
    """What a new page is sent: every tab its own label again (gradio then translates it in the page's language),
    the client id it keeps or a new one for an id that is no text or too long, the language it asked for."""
    from gradio.i18n import I18nData

    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(tmp_path / "runs"), watchdog=False))
    try:
        demo = build_app(controller)
        load = next(f for f in demo.fns.values() if f.api_name == "page_load")
        tabs = {b.id: b for b in demo.blocks.values() if isinstance(b, gr.Tab)}
        assert sorted(tabs) == ["compare", "rollouts", "runs", "train"]
        out = load.fn("visitor-1", "ru-RU")
        labels = {
            tab_id: out[tab].label.to_dict()["key"] if isinstance(out[tab].label, I18nData) else out[tab].label
            for tab_id, tab in tabs.items()
        }
        assert labels == {tab_id: f"tab.{tab_id}" for tab_id in tabs}
        by_value = list(out.values())
        assert "visitor-1" in by_value and "ru" in by_value
        for bad in (None, 7, "", "x" * 201):
            fresh = load.fn(bad, "en")
            ids = [v for v in fresh.values() if isinstance(v, str) and len(v) == 32]
            assert ids and all(i != bad for i in ids)
    finally:
        controller.close()
