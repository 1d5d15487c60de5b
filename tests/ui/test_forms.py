"""Every number box of the page refuses what it cannot use by its label, in the page's language, with no toast and
no traceback: a value far out of any range, and on the Train form a box left empty. The boxes are found in the page
gradio serves (every ``number`` and ``slider`` component), and each is sent through the event the page itself sends
for it (the box's own event, else the button's that reads it), on a live server, from a Russian page
(``apputil.call_event``). A box the page grows without a way to refuse it by name fails here.

``python -m pytest tests/ui/test_forms.py`` (about a minute).

UI logic without a server: form mapping, limits, views and the controller on a run folder.

``python -m pytest tests/ui/test_forms.py``"""

import logging
import re
from dataclasses import replace

import httpx
import pytest
from apputil import call_event, running_app
from factories import finished_run

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import peft_config
from rloo_demo.errors import ConfigError
from rloo_demo.models.hub import EMBEDDED_CLASSIFIER
from rloo_demo.public.limits import LOCAL
from rloo_demo.server.cache import SharedBuilds
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.forms import (
    BUILTIN_REWARDS,
    FIELD,
    FORM_FIELDS,
    config_from_form,
    defaults,
    field_label,
    form_settings,
)
from rloo_demo.ui.views import arithmetic_markdown, cli_command, group_rows, groups_html, run_rows, status_line

# ----------------------------------------------------------------------------- number boxes


LIMITS = replace(LOCAL, sampling_per_minute=None, event_ms_per_minute=None)
LOCALE = "ru"
HOSTILE = -(10**12)  # below every box's range, and far above none's: each refuses it
# Page-wide events that read a box among many but refuse nothing themselves (the language switch, the tick, the
# view's pin): a box is exercised through the events that act on it.
PAGE_WIDE = {"page_language", "page_tick", "pin_view"}
# The reward boxes whose weight is read only when they hold a reward (a weight box is tried with its reward set)
REWARD_BOXES = {
    "custom_classifier": f"classifier:{EMBEDDED_CLASSIFIER}",
    "extra_reward": "keyword:great",
    "reward_module": "examples/rewards.py:keyword_count",
}
# Names a Russian refusal keeps as they are: terms, settings' and estimators' names, what the user typed
NAMES = {"NaN", "LoRA", "RLOO", "GRPO", "leave", "one", "out", "rloo", "reinforce", "embedded", "imdb"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    finished_run(root)
    with running_app(root, limits=LIMITS) as (url, controller):
        config = httpx.get(f"{url}config", timeout=30).json()
        yield url, controller, config


def no_traceback(caplog, capfd) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]


def label_key(component) -> str:
    label = component["props"].get("label")
    match = re.search(r'"key": "([^"]+)"', label or "")
    assert match, f"box {component['id']} has no translated label: {label!r}"
    return match.group(1)


def boxes(config) -> list[dict]:
    """Every number box the page shows (number inputs and sliders)."""
    found = [c for c in config["components"] if c["type"] in ("number", "slider")]
    assert len(found) >= 30, len(found)  # the Train form's 17, the smoothing, the Rollouts tab's, Compare's
    return found


def events_for(config, box) -> list[dict]:
    """The events a box is sent by: its own (the box triggers them), else the named ones that read it."""
    deps = [d for d in config["dependencies"] if d.get("api_name") and d["api_name"] not in PAGE_WIDE]
    own = [d for d in deps if any(t[0] == box["id"] for t in d["targets"]) and box["id"] in d["inputs"]]
    reading = [d for d in deps if box["id"] in d["inputs"]]
    events = own or reading
    if any(d["api_name"] == "train_estimate" for d in events):  # a form box: Start refuses it the same way
        events += [d for d in reading if d["api_name"] == "train_start"]
    return events


def payload(config, dep, box_id, value) -> list:
    """The event's inputs as a browser sends them: the box's value hostile, every other input its default (a
    client id for the browser state; the page's states are the session's, set by its load)."""
    components = {c["id"]: c for c in config["components"]}
    names = form_names(config)
    data = []
    for cid in dep["inputs"]:
        comp = components[cid]
        if cid == box_id:
            data.append(value)
        elif comp["type"] == "browserstate":
            data.append("cid-boxes")
        elif names.get(cid) in REWARD_BOXES:
            data.append(REWARD_BOXES[names[cid]])
        elif names.get(cid) == "rewards":  # every built-in reward ticked: each weight box is read
            data.append(list(BUILTIN_REWARDS))
        elif comp["type"] == "dropdown" and not comp["props"].get("value"):  # a prompt picked (the probe's)
            data.append("This movie was")
        else:
            data.append(comp["props"].get("value"))
    return data


def form_names(config) -> dict[int, str]:
    """Component id -> the Train form's field name, from Start's inputs (client id, the form, the locale)."""
    start = next(d for d in config["dependencies"] if d.get("api_name") == "train_start")
    return dict(zip(start["inputs"][1:-1], FORM_FIELDS, strict=True))


def shown_label(config, box) -> str:
    """The box's label as the page writes it in a refusal: a form field by its label (a weight with its reward),
    any other box quoted."""
    name = form_names(config).get(box["id"])
    if name is not None:
        return f"**{field_label(name, LOCALE)}**"
    return i18n.t(LOCALE, "common.quoted", text=i18n.t(LOCALE, label_key(box)))


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def english_left(text: str, label: str) -> list[str]:
    """English words left in a refusal once its label (a name the user sees) and its numbers are taken out."""
    rest = re.sub(r"<[^>]+>", " ", text.replace(label, " "))  # the evaluation's refusal is HTML
    return [w for w in re.findall(r"[A-Za-z]{3,}", rest) if w not in NAMES]


def refuse(url, config, box, value, caplog, capfd):
    """Send ``value`` in ``box`` by each of its events; return (event, the refusal text, outputs) per event."""
    session = f"boxes-{box['id']}-{value}"
    call_event(url, "page_load", ["cid-boxes", LOCALE], session_hash=session)
    caplog.clear()
    capfd.readouterr()
    answers = []
    for dep in events_for(config, box):
        out = call_event(url, dep["api_name"], payload(config, dep, box["id"], value), session_hash=session)
        label = shown_label(config, box)
        refusals = [s for s in strings(out) if label in s]
        assert refusals, (dep["api_name"], label, out)  # named by its label, in the page's language
        answers.append((dep, refusals[0], out))
    no_traceback(caplog, capfd)  # no toast (call_event raises on gradio's error) and no traceback
    return answers


def test_every_number_box_of_the_page_has_an_event_that_refuses_it(app):
    _, _, config = app
    missing = [(b["id"], label_key(b)) for b in boxes(config) if not events_for(config, b)]
    assert missing == []


@pytest.mark.parametrize("index", range(33))
def test_a_number_box_refuses_a_value_out_of_range_by_its_label_in_the_pages_language(app, caplog, capfd, index):
    url, controller, config = app
    found = boxes(config)
    assert len(found) == 33, f"the page has {len(found)} number boxes: update the range above"
    box = found[index]
    for dep, refusal, _ in refuse(url, config, box, HOSTILE, caplog, capfd):
        label = shown_label(config, box)
        assert str(HOSTILE) in refusal, refusal  # the value is named, not made the nearest allowed
        assert english_left(refusal, label) == [], (dep["api_name"], refusal)
    assert not controller.runner.active(), "a refused form started a run"


FORM_NUMBERS = [n for n in FORM_FIELDS if n.startswith("w_")] + [
    "num_generations",
    "prompts_per_step",
    "max_steps",
    "learning_rate",
    "beta",
    "max_new_tokens",
    "temperature",
    "seed",
    "reward_offset",
    "lora_r",
    "variance_every",
]


@pytest.mark.parametrize("name", FORM_NUMBERS)
def test_an_emptied_form_box_says_in_words_that_it_is_empty(app, caplog, capfd, name):
    """An emptied box arrives as None: it is named and said to be empty (a weight: what a weight means), not
    "must be a list of finite numbers or null, not [None]"."""
    url, _, config = app
    box_id = next(cid for cid, field in form_names(config).items() if field == name)
    box = next(c for c in config["components"] if c["id"] == box_id)
    key = "form.weight_empty" if name.startswith("w_") else "form.number_empty"
    for dep, refusal, _ in refuse(url, config, box, None, caplog, capfd):
        assert f"{shown_label(config, box)}: {i18n.t(LOCALE, key)}" in refusal, (dep["api_name"], refusal)
        assert "None" not in refusal and english_left(refusal, shown_label(config, box)) == []


def test_a_refused_toy_k_and_step_put_their_box_back(app, caplog, capfd):
    """The slider, its box and what is drawn never disagree: the toy's K goes back to the K its table shows, the
    Rollouts step to a step the run has."""
    url, _, config = app
    by_key = {label_key(b): b for b in boxes(config)}
    for key, back in (("toy.k", 4), ("rollouts.step", 1)):
        box = by_key[key]
        ((dep, _, out),) = refuse(url, config, box, 1000, caplog, capfd)
        shown = out[dep["outputs"].index(box["id"])]
        assert (shown.get("value") if isinstance(shown, dict) else shown) == back, (key, shown)


def test_an_emptied_prompts_field_is_refused_by_its_label(app, caplog, capfd):
    url, controller, config = app
    names = form_names(config)
    box_id = next(cid for cid, name in names.items() if name == "data_source")
    box = next(c for c in config["components"] if c["id"] == box_id)
    call_event(url, "page_load", ["cid-prompts", LOCALE], session_hash="prompts")
    start = next(d for d in config["dependencies"] if d.get("api_name") == "train_start")
    out = call_event(url, "train_start", payload(config, start, box["id"], "   "), session_hash="prompts")
    expected = f"**{field_label('data_source', LOCALE)}**: {i18n.t(LOCALE, 'form.prompts_empty')}"
    assert any(expected in s for s in strings(out)), out
    assert not controller.runner.active(), "an emptied Prompts field trained on the embedded data"
    no_traceback(caplog, capfd)


# ----------------------------------------------------------------------------- ui units


def make_group(rewards, beta=0.0, normalize=False, step=3):
    k = len(rewards)
    total = sum(rewards)
    comps = []
    for i, r in enumerate(rewards):
        base = (total - r) / (k - 1)
        comps.append(
            {
                "text": f"completion {i}",
                "num_tokens": 5,
                "scores": {"vader_compound": r},
                "weighted_reward": r,
                "kl": 0.0,
                "kl_penalty": 0.0,
                "shaped_reward": r,
                "baseline": base,
                "raw_advantage": r - base,
                "advantage": r - base,
            }
        )
    return {
        "step": step,
        "group": 0,
        "prompt": "This movie was",
        "k": k,
        "beta": beta,
        "normalize_advantages": normalize,
        "weights": {"vader_compound": 1.0},
        "completions": comps,
    }


def test_form_defaults_round_trip_to_the_default_config():
    values = defaults()
    assert set(values) == set(FORM_FIELDS)
    config = config_from_form(values, output_dir="runs")
    assert config == RunConfig(reward_weights=[1.0])


def test_form_collects_rewards_weights_and_custom_classifier():
    values = defaults() | {
        "rewards": ["vader_compound", "length_penalty"],
        "w_length_penalty": 0.25,
        "custom_classifier": "./assets/tiny-imdb-sentiment",
        "w_custom": 2,
    }
    config = config_from_form(values)
    assert config.rewards == ["vader_compound", "length_penalty", "classifier:./assets/tiny-imdb-sentiment"]
    assert config.reward_weights == [1.0, 0.25, 2.0]
    assert not config.use_lora
    assert peft_config(config_from_form(defaults() | {"use_lora": True, "lora_r": 4})).r == 4


def test_form_passes_the_reward_offset_on_and_refuses_a_bad_one():
    assert FIELD["reward_offset"].fold == "own_rewards"
    assert config_from_form(defaults() | {"reward_offset": 1.5}).reward_offset == 1.5
    assert form_settings({k: v for k, v in defaults().items() if k != "reward_offset"})["reward_offset"] == 0.0
    for bad in (float("nan"), 1e6, "one"):
        with pytest.raises(ConfigError) as info:
            config_from_form(defaults() | {"reward_offset": bad})
        assert "reward_offset" in info.value.problems


def test_form_errors_name_every_bad_field():
    values = defaults() | {"num_generations": 1, "max_steps": "ten", "learning_rate": -1}
    with pytest.raises(ConfigError) as info:
        config_from_form(values)
    assert "max_steps" in info.value.problems
    values = defaults() | {"num_generations": 1, "learning_rate": -1}
    with pytest.raises(ConfigError) as info:
        config_from_form(values)
    assert {"num_generations", "learning_rate"} <= set(info.value.problems)


def test_status_line():
    records = [{"step": s, "reward": 0.1 * s, "time": 2.0 * s} for s in range(1, 11)]  # 0.5 steps/s
    line = status_line("running", records, 100, 25.0, "r1")  # 5 s of model loading before step 1
    assert "step 10 / 100" in line and "0.50 steps/s" in line and "ETA 3:00" in line and "r1" in line
    assert "ETA" not in status_line("finished", records, 10, 20.0)


def test_group_table_and_html_colour_by_advantage_sign():
    g = make_group([1.0, 0.0, 0.5, 0.5])
    headers, rows = group_rows(g)
    assert headers[-3:] == ["shaped reward", "LOO baseline", "advantage"]
    assert [r[-1] for r in rows] == pytest.approx([2 / 3, -2 / 3, 0.0, 0.0], abs=1e-4)
    html = groups_html([g])
    assert html.count("rloo-pos") == 1 and html.count("rloo-neg") == 1 and html.count("rloo-zero") == 2
    assert "This movie was" in html


def test_arithmetic_uses_the_real_numbers():
    g = make_group([1.0, 0.0, 0.5, 0.5])
    md = arithmetic_markdown(g, 0)
    assert "((+0.0000) + (+0.5000) + (+0.5000)) / 3 = **+0.3333**" in md
    assert "= **+0.6667**" in md and "pushed **up**" in md
    g = make_group([1.0, 0.0])
    g["normalize_advantages"] = True
    g["normalization"] = {"mean": 0.0, "std": 1.4142, "eps": 1e-4}
    assert "normalised over the batch" in arithmetic_markdown(g, 1)


def test_cli_command_reproduces_the_config():
    cfg = RunConfig(
        num_generations=8, beta=0.0, rewards=["vader_compound", "length_penalty"], normalize_advantages=True
    )
    cmd = cli_command(cfg)
    assert cmd.startswith("python -m rloo_demo train")
    assert "--num-generations 8" in cmd and "--beta 0.0" in cmd and "--normalize-advantages" in cmd
    assert "--rewards vader_compound length_penalty" in cmd
    from rloo_demo.cli import build_parser, config_from_args

    args = build_parser().parse_args(cmd.split()[3:])
    assert config_from_args(args) == cfg
    assert cli_command(RunConfig(reward_weights=[1.0])) == "python -m rloo_demo train"  # unit weights = no weights


def test_run_rows(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="x"))
    run.append_metrics({"step": 1, "max_steps": 5, "reward": 0.1, "kl": 0.0})
    run.append_metrics({"step": 2, "max_steps": 5, "reward": 0.3, "kl": 0.01})
    rows = run_rows([run.summary()])
    assert rows == [["x", "", "running", "2/5", 0.1, 0.3, 0.01, "no", "", ""]]  # run, label, ..., note, error


def test_interrupted_runs_are_marked_failed_on_restart(tmp_path):
    from rloo_demo.server.runner import Runner

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="dead"))
    run.set_status("running", pid=2**22 + 12345)  # no such process
    Runner(str(tmp_path))
    st = run.status()
    assert st["status"] == "failed" and "interrupted" in st["error"]


def test_pages_watching_the_same_step_share_one_build_of_the_plots(monkeypatch):
    """Ten pages (or one client sending drawn=-1 every tick) must not rebuild a run's figures each tick: they are
    built once per new step, and again for another smoothing or language."""
    from types import SimpleNamespace

    from rloo_demo.server.readers import RunView
    from rloo_demo.ui.tabs import train as train_tab
    from rloo_demo.ui.tabs import train_plots

    class Page:  # the controller's reads a tick makes (no phase, no summary), and its shared builds
        builds = SharedBuilds()

        def run_phase(self, name):
            return None

        def run_summary(self, name, locale):
            return None

    builds = []
    real = train_plots.figures
    monkeypatch.setattr(train_plots, "figures", lambda *a, **k: builds.append(a[1:]) or real(*a, **k))
    records = [{"step": s, "logged_at": 1000.0 + s, "reward": 0.1 * s, "kl": 0.01 * s} for s in range(1, 6)]
    texts = {n: n for n in ("status", "run_error", "alerts", "summary", "alert_step", "alert_open", "drawn")}
    ui = SimpleNamespace(**texts, plots=[f"plot{i}" for i in range(10)], controller=Page())

    def view(n):
        return RunView("shared-run", "running", None, records[:n], 10, 1.0, None, True)

    first = train_tab.render(ui, view(4), 0.6, -1, "en")
    for _ in range(9):
        again = train_tab.render(ui, view(4), 0.6, -1, "en")
    assert len(builds) == 1
    assert [again[p] for p in ui.plots] == [first[p] for p in ui.plots] and again["drawn"] == 4
    train_tab.render(ui, view(5), 0.6, -1, "en")  # a new step
    train_tab.render(ui, view(5), 0.0, -1, "en")  # another smoothing
    train_tab.render(ui, view(5), 0.0, -1, "ru")  # another language
    train_tab.render(ui, view(5), float("nan"), -1, "ru")  # not a number: the default smoothing
    train_tab.render(ui, view(5), 0.0001, -1, "ru")  # what the slider cannot send: its nearest value (0, built)
    train_tab.render(ui, view(5), 7.0, -1, "ru")  # beyond the slider: its end
    train_tab.render(ui, view(5), 0.95, -1, "ru")
    train_tab.render(ui, view(5), 0.95, -1, "ru-RU")  # the same language, however a client spells it
    assert builds == [(0.6, "en"), (0.6, "en"), (0.0, "en"), (0.0, "ru"), (None, "ru"), (0.95, "ru")]
    drawn = train_tab.render(ui, view(5), 0.0, 5, "en")
    assert "status" in drawn and not {*ui.plots, "drawn"} & set(drawn)  # drawn already: no plots


def test_visitors_are_told_apart_by_forwarded_for_only_behind_a_proxy(monkeypatch):
    """Per-visitor rates key on the address. A client without a proxy in front writes X-Forwarded-For itself and
    could be someone new on every call, so the header counts only from a trusted proxy: on a Space its own
    (``limits.SPACE_PROXIES``), elsewhere those the operator names in ``RLOO_TRUSTED_PROXIES``."""
    from types import SimpleNamespace

    from rloo_demo.ui.common import caller_of

    headers = {"x-forwarded-for": "1.2.3.4, 198.51.100.7"}
    request = SimpleNamespace(headers=headers, client=SimpleNamespace(host="10.9.8.7"))
    direct = SimpleNamespace(headers=headers, client=SimpleNamespace(host="127.0.0.1"))
    for var in ("SPACE_ID", "RLOO_TRUST_FORWARDED", "RLOO_TRUSTED_PROXIES"):
        monkeypatch.delenv(var, raising=False)
    assert caller_of(request, "cid").host == "10.9.8.7"
    monkeypatch.setenv("SPACE_ID", "someone/rloo-demo")
    assert caller_of(request, "cid").host == "198.51.100.7"  # the hop the Space's proxy appended
    assert caller_of(direct, "cid").host == "127.0.0.1"  # a caller that is not the Space's proxy
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "0")
    assert caller_of(request, "cid").host == "10.9.8.7"
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.delenv("RLOO_TRUST_FORWARDED")
    monkeypatch.setenv("RLOO_TRUSTED_PROXIES", "10.9.0.0/16")
    assert caller_of(request, "cid").host == "198.51.100.7"
    request.headers = {}
    assert caller_of(request, "cid").host == "10.9.8.7"


def test_the_smoothing_slider_event_goes_through_the_shared_builds(tmp_path, monkeypatch):
    """The slider's release event (``train_redraw``) is callable by any client with any value: it must use the
    same shared, snapped builds as the tick, not build the plots on every call. The shared builds start empty here:
    they live as long as the process, and mutmut runs this test twice in one (its stats, then its clean run), where
    the second found the first's builds and built nothing."""
    import math

    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller
    from rloo_demo.ui.tabs import train_plots

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="slid"))
    for step in range(1, 6):
        run.append_metrics({"step": step, "reward": 0.1 * step, "logged_at": 1000.0 + step})
    run.set_status("finished")
    demo = build_app(Controller(Runner(str(tmp_path), watchdog=False)))
    redraw = next(fn.fn for fn in demo.fns.values() if fn.api_name == "train_redraw")
    builds = []
    real = train_plots.figures
    monkeypatch.setattr(train_plots, "figures", lambda *a, **k: builds.append(a[1:]) or real(*a, **k))
    outs = [redraw("slid", value, "en") for value in (0.31, 0.3, 0.29999)]
    assert builds == [(0.3, "en")]
    assert all(len(out) == 10 for out in outs)  # every plot, each time
    for value in (math.nan, "x", 7.5, -0.1):  # refused by the slider's label, before anything is built
        (refusal,) = redraw("slid", value, "ru").values()
        assert refusal.startswith(i18n.t("ru", "common.error")) and i18n.t("ru", "common.smoothing") in refusal
    assert builds == [(0.3, "en")]


# ----------------------------------------------------------------------------- Compare: which model fills which column


class _Tagged:
    """A stand-in policy: only its tag matters to the fake sampler below."""

    def __init__(self, tag):
        self.tag = tag

    def eval(self):
        return self


COMPARE_TEXTS = {  # what each model says (vader scores them far apart, so a swap shows in every number)
    "base": ["awful, boring and terrible", "the worst film, sad and dull", "bad bad bad"],
    "trained": ["wonderful, a great and lovely film", "amazing! the best, truly good", "good good good"],
}


def _compare_controller(tmp_path, monkeypatch):
    """A controller over one finished run with a saved model, whose base and trained policies are tagged stand-ins
    (loaded by folder, as the real ones are) and whose sampler returns each model's own texts."""
    from rloo_demo.server import inference as inference_module
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.controller import Controller

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="cmp"))
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    trained_folder = str(run.model_dir)

    def load(name):
        return (_Tagged("trained" if name == trained_folder else "base"), None)

    def fake_sample(model, tok, prompt, n, *args):
        texts = COMPARE_TEXTS[model.tag][:n]
        return [{"text": text, "token_ids": [len(model.tag)] * (i + 1)} for i, text in enumerate(texts)]

    monkeypatch.setattr(controller.inference, "_load", load)
    monkeypatch.setattr(inference_module, "sample", fake_sample)
    monkeypatch.setattr(inference_module, "base_perplexity", lambda model, tok, prompts, ids: float(10 * ids[0][0]))
    return controller, run.name


def test_compare_puts_each_models_samples_in_its_own_column(tmp_path, monkeypatch):
    """The Compare tab's Sample handler, from the controller to the two tables and the summary: the base column
    holds the base model's samples and scores, the trained column the trained model's (a swap anywhere on the way,
    in the server, the tables or the handler, fails here)."""
    from rloo_demo.eval.evaluation import Scorer
    from rloo_demo.ui.app import build_app

    controller, name = _compare_controller(tmp_path, monkeypatch)
    demo = build_app(controller)
    handler = next(fn.fn for fn in demo.fns.values() if fn.api_name == "compare_sample")
    component = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    out = handler("me", name, "This movie was", 3, 8, 1.0, 1.0, 5, "en")

    scorer = Scorer(RunConfig())
    expected, cells = {}, {}
    for label, texts in COMPARE_TEXTS.items():
        scores, rewards = scorer(["This movie was"] * 3, texts)
        expected[label] = [
            [round(r, 3), *[round(s[i], 3) for s in scores.values()], t]
            for i, (t, r) in enumerate(zip(texts, rewards, strict=True))
        ]
        # the cells of its table: #, the reward (the trained-on score is the same number: not repeated), the
        # held-out scores, then the completion on a row of its own
        held_out = [n for n in scores if n != "vader_compound"]
        cells[label] = [
            c
            for i, (t, r) in enumerate(zip(texts, rewards, strict=True))
            for c in [str(i + 1), f"{r:+.3f}", *[f"{scores[n][i]:+.3f}" for n in held_out], t]
        ]
    assert expected["base"] != expected["trained"] and list(scores)[0] == "vader_compound"
    for side, label in (("base-samples", "base"), ("trained-samples", "trained")):
        markup = out[component[side]]
        # each name may break after its underscore (<wbr>), nowhere else
        headers = re.findall("<th>(.*?)</th>", markup)
        assert [h.replace("<wbr>", "") for h in headers] == ["#", "reward (vader_compound)", *held_out]
        assert headers[1] == "reward (vader_<wbr>compound)"
        assert [re.sub("<[^>]+>", "", c) for c in re.findall("<td[^>]*>(.*?)</td>", markup)] == cells[label]
    mean = {label: sum(row[0] for row in rows) / 3 for label, rows in expected.items()}
    assert mean["base"] < 0 < mean["trained"]
    summary = out[component["compare-summary"]]
    assert f"base **{mean['base']:+.3f}**, trained **{mean['trained']:+.3f}**" in summary
    # perplexities: the fake gives 10 x the first token id, 4 for "base" and 7 for "trained"
    assert "perplexity 40 → 70" in summary


def test_compare_summary_and_tables_keep_base_and_trained_apart():
    from rloo_demo.ui.views import compare_summary, compare_table

    base = [{"text": "b", "reward": -0.25, "scores": {"vader_compound": -0.5, "length_penalty": 0.25}}]
    trained = [{"text": "t", "reward": 0.75, "scores": {"vader_compound": 0.5, "length_penalty": 0.25}}]
    headers, rows = compare_table(base)
    assert headers == ["reward", "vader_compound", "length_penalty", "completion"]
    assert rows == [[-0.25, -0.5, 0.25, "b"]]
    assert compare_table(trained)[1] == [[0.75, 0.5, 0.25, "t"]]
    result = {
        "trained_on": ["vader_compound", "length_penalty"],
        "seed": 3,
        "base": base + [{"reward": -0.75}],  # mean -0.5
        "trained": trained + [{"reward": 0.25}],  # mean +0.5
        "judges": {
            "base": {"distinct_2": 0.91, "repetition": 0.02, "base_perplexity": 120.0},
            "trained": {"distinct_2": 0.34, "repetition": 0.56, "base_perplexity": 900.0},
        },
    }
    md = compare_summary(result)
    assert "base **-0.500**, trained **+0.500**" in md and "same seed 3" in md
    assert "distinct-2 0.91 → 0.34" in md and "repetition 0.02 → 0.56" in md and "perplexity 120 → 900" in md
