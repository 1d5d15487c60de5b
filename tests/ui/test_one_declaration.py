"""A built-in reward, a Train plot and a form setting are each one declaration plus its translations: a throwaway one
of each, added at run time to the rewards table (``task.rewards.REWARDS``), the plots table
(``ui.tabs.train_plots.TRAIN_PLOTS``) and RunConfig's fields, with its texts added to the four locales, is found in the
form, the limits, the help texts and the page (the config ``build_app`` serves), with no other edit.

The additions are made in a fresh interpreter before the modules that read the tables are imported, as an edit of
the source would be, and the interpreter answers with what it found: nothing here reaches into the modules that
derive from the tables. ``python -m pytest tests/ui/test_one_declaration.py`` (about half a minute).
"""

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

LOCALES = ("en", "ru", "ka", "ro")
# The throwaway declarations' texts, one per locale, told apart by the locale's code
TEXTS = {
    "train.w_demo": "weight: demo",
    "reward.help.demo_reward": "a demo reward, 1 for every completion",
    "reward.help.demo_private": "a reward only a local server offers",
    "train.w_private": "weight: private",
    "help.demo_knob": "how much demo, in {range}",
    "train.demo_knob": "Demo knob",
    "train.plot_demo": "Demo plot",
    "train.note_demo": "What the demo plot shows",
    "plot.demo_title": "Demo time",
}

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from dataclasses import field, fields, make_dataclass

    out_path, texts = sys.argv[1], json.loads(sys.argv[2])
    from rloo_demo import i18n

    for code in i18n.LOCALES:  # the translations of the three declarations
        i18n.load(code).update({k: v if code == "en" else f"[{code}] {v}" for k, v in texts.items()})

    # 1. a built-in reward: one entry of the rewards table (and one a public server does not offer)
    from rloo_demo.task import rewards

    def demo_reward(prompts, completions, completion_ids=None, **columns):
        return [1.0 for _ in completions]

    rewards.REWARDS["demo_reward"] = rewards.BuiltinReward(
        lambda: demo_reward, "train.w_demo", "reward.help.demo_reward", weight=0.25
    )
    rewards.REWARDS["demo_private"] = rewards.BuiltinReward(
        lambda: demo_reward, "train.w_private", "reward.help.demo_private", public=False
    )

    # 2. a setting: one field of RunConfig (a subclass with it stands for the edited class)
    from rloo_demo import config
    from rloo_demo.settings import Range, Widget

    knob = field(default=3, metadata={"help": "help.demo_knob", "range": Range(1, 9),
                                      "form": Widget("sampling", "train.demo_knob", "whole", elem_id="demo-knob")})
    config.RunConfig = make_dataclass("RunConfig", [("demo_knob", int, knob)], bases=(config.RunConfig,))

    # 3. a Train plot: one row of the plots table
    from rloo_demo.ui import plots
    from rloo_demo.ui.tabs import train_plots

    train_plots.TRAIN_PLOTS += (
        train_plots.TrainPlot("demo_plot", "train.plot_demo", "train.note_demo", "demo-plot",
                              plots.metric_plot("step_time", "Demo time")),
    )

    # built afresh: everything that reads the tables is imported only now
    from rloo_demo.cli import build_parser
    from rloo_demo.config import RunConfig, help_text
    from rloo_demo.errors import ConfigError
    from rloo_demo.public.limits import LOCAL, PUBLIC
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui import forms
    from rloo_demo.ui.tabs import train as train_tab
    from rloo_demo.ui.app import build_app, page_translations
    from rloo_demo.ui.common import form_refusal
    from rloo_demo.ui.controller import Controller

    def page(limits):
        controller = Controller(Runner(sys.argv[3], watchdog=False, limits=limits))
        try:
            served = build_app(controller).get_config_file()
        finally:
            controller.close()
        return json.loads(json.dumps(served, default=lambda v: v.to_dict() if hasattr(v, "to_dict") else repr(v)))

    def refusals(limits, reward):
        return {k: str(v) for k, v in limits.config_problems(RunConfig(rewards=[reward])).items()}

    form = forms.defaults() | {"rewards": ["demo_reward"], "w_demo_reward": 2, "demo_knob": 5.0}
    controller = Controller(Runner(sys.argv[3], watchdog=False, limits=LOCAL))
    try:
        controller.check_form(forms.defaults() | {"demo_knob": 12})
        refused = None
    except ConfigError as exc:
        refused = form_refusal(controller, exc, forms.defaults() | {"demo_knob": 12}, "ru")
    finally:
        controller.close()
    records = [{"step": s, "reward": 0.1 * s, "step_time": 0.5 + s} for s in range(1, 4)]
    drawn = [json.loads(f.plot) for f in train_tab.figures(records, 0.0, "ru")]
    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    answer = {
        "fields": forms.FORM_FIELDS,
        "defaults": {k: forms.defaults()[k] for k in ("w_demo_reward", "w_demo_private", "demo_knob")},
        "settings": forms.form_settings(form),
        "config": RunConfig.from_dict(forms.form_settings(form)).to_dict(),
        "problems": {
            "knob_12": {k: [str(v), v.key] for k, v in RunConfig(demo_knob=12).problems().items()},
            "knob_5": sorted(RunConfig(demo_knob=5).problems()),
            "public_demo": refusals(PUBLIC, "demo_reward"),
            "public_private": refusals(PUBLIC, "demo_private"),
            "local_private": refusals(LOCAL, "demo_private"),
        },
        "refused_ru": refused,
        "help": {code: help_text("demo_knob", code) for code in i18n.LOCALES},
        "rewards_help": help_text("rewards"),
        "cli": train.format_help(),
        "reward_help": {
            "local": {c: t["train.reward_help"] for c, t in page_translations(LOCAL).items()},
            "public": {c: t["train.reward_help"] for c, t in page_translations(PUBLIC).items()},
        },
        "figures": [f["layout"]["title"]["text"] for f in drawn],
        "demo_figure": drawn[-1]["data"],
        "page": {"local": page(LOCAL), "public": page(PUBLIC)},
    }
    with open(out_path, "w") as out:
        json.dump(answer, out)
    """
)


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """What a fresh interpreter with the three throwaway declarations finds."""
    folder = tmp_path_factory.mktemp("declared")
    out = folder / "found.json"
    runs = folder / "runs"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), json.dumps(TEXTS), str(runs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def _components(config):
    return {c["id"]: c for c in config["components"]}


def _key(text):
    """The translation key a static text carries (a Markdown's value is sent as ``__i18n__{...}``)."""
    if isinstance(text, str) and text.startswith("__i18n__"):
        text = json.loads(text.removeprefix("__i18n__"))
    return text.get("key") if isinstance(text, dict) else None


def _by(config, **wanted):
    """The components whose props hold every ``wanted`` value (a label by its text key)."""
    out = []
    for c in config["components"]:
        props = c.get("props", {})
        if all(props.get(k) == v or _key(props.get(k)) == v for k, v in wanted.items()):
            out.append(c)
    return out


def _parents(layout, target, trail=()):
    """The ids of the blocks that hold ``target`` in the page's layout, outermost first."""
    if layout["id"] == target:
        return list(trail)
    for child in layout.get("children", []):
        found = _parents(child, target, (*trail, layout["id"]))
        if found is not None:
            return found
    return None


def _event(config, api_name):
    return next(d for d in config["dependencies"] if d.get("api_name") == api_name)


# ----------------------------------------------------------------------------- a built-in reward


def test_a_new_reward_is_a_choice_of_the_form_with_its_own_weight_box(found):
    fields = found["fields"]
    assert fields.index("w_demo_reward") == fields.index("w_length_penalty") + 1  # after the built-in ones
    assert found["defaults"]["w_demo_reward"] == 0.25  # the entry's default weight
    assert found["settings"]["rewards"] == ["demo_reward"] and found["settings"]["reward_weights"] == [2]
    assert found["config"]["rewards"] == ["demo_reward"]
    local = found["page"]["local"]
    (choices,) = _by(local, label="train.rewards")
    assert [c[0] for c in choices["props"]["choices"]][-2:] == ["demo_reward", "demo_private"]
    (box,) = _by(local, label="train.w_demo")
    assert box["type"] == "number" and box["props"]["value"] == 0.25 and box["props"]["visible"] is True
    (start,) = [d for d in local["dependencies"] if d.get("api_name") == "train_start"]
    assert box["id"] in start["inputs"]


def test_a_public_server_offers_a_public_reward_and_refuses_a_local_one_by_the_table(found):
    problems = found["problems"]
    assert problems["public_demo"] == {}
    assert set(problems["public_private"]) == {"rewards"}
    assert "demo_reward" in problems["public_private"]["rewards"]  # what it offers instead, from the table
    assert "demo_private" not in problems["public_private"]["rewards"].split("use ", 1)[1]
    assert problems["local_private"] == {}
    public = found["page"]["public"]
    (choices,) = _by(public, label="train.rewards")
    assert "demo_reward" in [c[0] for c in choices["props"]["choices"]]
    assert "demo_private" not in [c[0] for c in choices["props"]["choices"]]
    (hidden,) = _by(public, label="train.w_private")
    assert hidden["props"]["visible"] is False


def test_a_new_rewards_help_is_in_the_reward_help_in_every_language(found):
    assert "demo_reward" in found["rewards_help"] and "demo_private" in found["rewards_help"]  # the CLI's --rewards
    for code in LOCALES:
        local, public = found["reward_help"]["local"][code], found["reward_help"]["public"][code]
        text = TEXTS["reward.help.demo_reward"]
        assert f"**demo_reward**: {text if code == 'en' else f'[{code}] {text}'}" in local
        assert "**demo_private**" in local and "**demo_private**" not in public and "**demo_reward**" in public
        assert local.index("**length_penalty**") < local.index("**demo_reward**") < local.index("**keyword:")


# ----------------------------------------------------------------------------- a setting


def test_a_new_setting_is_a_form_field_in_its_fold_with_its_widget(found):
    fields = found["fields"]
    assert fields.index("demo_knob") == fields.index("seed") + 1  # the last of its fold (sampling)
    assert found["defaults"]["demo_knob"] == 3
    assert found["settings"]["demo_knob"] == 5 and type(found["settings"]["demo_knob"]) is int  # a whole number
    assert found["config"]["demo_knob"] == 5
    local = found["page"]["local"]
    (knob,) = _by(local, elem_id="demo-knob")
    assert knob["type"] == "number" and knob["props"]["precision"] == 0 and knob["props"]["value"] == 3
    assert knob["props"]["label"] == {"__type__": "translation_metadata", "key": "train.demo_knob"}
    (fold,) = _by(local, elem_id="fold-sampling")
    assert fold["id"] in _parents(local["layout"], knob["id"])
    for api_name in ("train_start", "train_estimate"):  # its value reaches Start, and a change the estimate
        assert knob["id"] in _event(local, api_name)["inputs"]
    assert [knob["id"], "change"] in _event(local, "train_estimate")["targets"]


def test_a_new_settings_range_is_checked_and_written_into_its_help_in_every_language(found):
    (message, key) = found["problems"]["knob_12"]["demo_knob"]
    assert key == "cfg.closed_range" and message == "must be in [1, 9], not 12"
    assert found["problems"]["knob_5"] == []
    assert found["refused_ru"] is not None
    assert "[ru] Demo knob" in found["refused_ru"] and "[1, 9]" in found["refused_ru"]  # by its label, in Russian
    for code in LOCALES:
        prefix = "" if code == "en" else f"[{code}] "
        assert found["help"][code] == f"{prefix}how much demo, in [1, 9]"
    assert "--demo-knob DEMO_KNOB" in found["cli"]
    assert "how much demo, in [1, 9] (default: 3)" in " ".join(found["cli"].split())


# ----------------------------------------------------------------------------- a Train plot


def test_a_new_plot_is_on_the_page_with_its_note_and_updated_by_the_tick(found):
    local = found["page"]["local"]
    (plot,) = _by(local, elem_id="demo-plot")
    assert plot["type"] == "plot" and plot["props"]["label"]["key"] == "train.plot_demo"
    (note,) = _by(local, elem_id="demo-plot-note")
    assert _key(note["props"]["value"]) == "train.note_demo"
    assert plot["id"] in _event(local, "page_tick")["outputs"]
    assert plot["id"] in _event(local, "train_redraw")["outputs"]
    assert plot["id"] in _event(local, "page_load")["outputs"]  # a page with no run gets its empty axes


def test_a_new_plot_is_drawn_by_its_builder_in_the_pages_language(found):
    assert len(found["figures"]) == 11
    assert found["figures"][-1] == "[ru] Demo time"
    (trace,) = found["demo_figure"]
    assert trace["x"] == [1, 2, 3] and trace["y"] == [1.5, 2.5, 3.5]
