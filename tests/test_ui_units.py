"""UI logic without a server: form mapping, limits, views and the controller on a run folder.

``python -m pytest tests/test_ui_units.py``
"""

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import peft_config
from rloo_demo.errors import ConfigError
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.forms import FORM_FIELDS, config_from_form, defaults
from rloo_demo.ui.views import arithmetic_markdown, cli_command, group_rows, groups_html, run_rows, status_line


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
    assert rows == [["x", "running", "2/5", 0.1, 0.3, 0.01, "no", ""]]


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
    from rloo_demo.ui import train_tab

    builds = []
    real = train_tab.figures
    monkeypatch.setattr(train_tab, "figures", lambda *a, **k: builds.append(a[1:]) or real(*a, **k))
    records = [{"step": s, "logged_at": 1000.0 + s, "reward": 0.1 * s, "kl": 0.01 * s} for s in range(1, 6)]
    ui = SimpleNamespace(status="status", run_error="error", plots=[f"plot{i}" for i in range(10)], drawn="drawn")

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
    assert train_tab.render(ui, view(5), 0.0, 5, "en").keys() == {"status", "error"}  # drawn already: no plots


def test_visitors_are_told_apart_by_forwarded_for_only_behind_a_proxy(monkeypatch):
    """Per-visitor rates key on the address. A client without a proxy in front writes X-Forwarded-For itself and
    could be someone new on every call, so the header counts only on a Space or where the operator trusts it."""
    from types import SimpleNamespace

    from rloo_demo.ui.common import caller_of

    peer = SimpleNamespace(host="127.0.0.1")
    request = SimpleNamespace(headers={"x-forwarded-for": "1.2.3.4, 10.9.8.7"}, client=peer)
    for var in ("SPACE_ID", "RLOO_TRUST_FORWARDED"):
        monkeypatch.delenv(var, raising=False)
    assert caller_of(request, "cid").host == "127.0.0.1"
    monkeypatch.setenv("SPACE_ID", "someone/rloo-demo")
    assert caller_of(request, "cid").host == "10.9.8.7"  # the hop the Space's proxy appended
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "0")
    assert caller_of(request, "cid").host == "127.0.0.1"
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "1")
    assert caller_of(request, "cid").host == "10.9.8.7"
    request.headers = {}
    assert caller_of(request, "cid").host == "127.0.0.1"


def test_the_smoothing_slider_event_goes_through_the_shared_builds(tmp_path, monkeypatch):
    """The slider's release event (``train_redraw``) is callable by any client with any value: it must use the
    same shared, snapped builds as the tick, not build the plots on every call."""
    import math

    from rloo_demo.server.runner import Runner
    from rloo_demo.ui import train_tab
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="slid"))
    for step in range(1, 6):
        run.append_metrics({"step": step, "reward": 0.1 * step, "logged_at": 1000.0 + step})
    run.set_status("finished")
    demo = build_app(Controller(Runner(str(tmp_path), watchdog=False)))
    redraw = next(fn.fn for fn in demo.fns.values() if fn.api_name == "train_redraw")
    builds = []
    real = train_tab.figures
    monkeypatch.setattr(train_tab, "figures", lambda *a, **k: builds.append(a[1:]) or real(*a, **k))
    outs = [redraw("slid", value, "en") for value in (0.31, 0.3, 0.29999, math.nan, "x")]
    assert builds == [(0.3, "en"), (None, "en")]
    assert all(len(out) == 10 for out in outs)  # every plot, each time
