"""The estimator lab's views, arena summary and controller doors, without a model: ``python -m pytest
tests/ui/test_lab_views.py`` (a few seconds)."""

import json

import pytest

from rloo_demo import i18n
from rloo_demo.arena import BETA_NOTE, PPO_NOTE, hierarchical_interval, markdown_table, per_prompt_gains, summarize
from rloo_demo.config import RunConfig
from rloo_demo.errors import NotFound
from rloo_demo.public.limits import PUBLIC
from rloo_demo.server.runner import Runner
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.views import (
    arithmetic_markdown,
    compare_summary,
    live_collapse_warning,
    meter_estimate_text,
    whatif_markdown,
)


def make_group(rewards, index=0, kl=None):
    k = len(rewards)
    completions = []
    for i, r in enumerate(rewards):
        b = (sum(rewards) - r) / (k - 1)
        c = {
            "text": f"c{i}",
            "num_tokens": 4,
            "scores": {"vader_compound": r},
            "weighted_reward": r,
            "kl": 0.0,
            "kl_penalty": 0.0,
            "shaped_reward": r,
            "baseline": b,
            "raw_advantage": r - b,
            "advantage": r - b,
        }
        if kl is not None:
            c.update(kl=kl[0], kl_k2=kl[1], kl_k3=kl[2])
        completions.append(c)
    return {
        "step": 2,
        "group": index,
        "prompt": "p",
        "k": k,
        "beta": 0.1,
        "normalize_advantages": False,
        "weights": {"vader_compound": 1.0},
        "completions": completions,
    }


def test_whatif_shows_every_estimator_and_the_identity_with_the_real_numbers():
    groups = [make_group([0.2, 0.2, 0.2, 0.2]), make_group([1.0, 0.0, 0.5, 0.5], index=1)]
    md = whatif_markdown(groups, 1)
    # a narrow column may break a name after its underscore
    assert "| # | r | rloo | grpo | dr_<wbr>grpo | reinforce_<wbr>pp | batch_<wbr>mean | reinforce |" in md
    # r = 1.0 in a group with mean 0.5: rloo 4/3 * 0.5, dr_grpo 0.5, grpo 0.5 / (std 0.4082 + 1e-4), reinforce 1.0
    assert "| 1 | +1.000 | +0.667 | +1.224 | +0.500 |" in md
    assert md.splitlines()[5].endswith("| +1.000 |")
    assert "K/(K−1) = 4/3 = 1.3333" in md
    assert "group mean = (+1.0000 + +0.0000 + +0.5000 + +0.5000) / 4 = +0.5000" in md
    assert "- #1: 1.3333 · (+1.0000 − (+0.5000)) = +0.6667 = r − mean of the other 3 = +1.0000 − (+0.3333)" in md
    assert "**+0.6667**" in md and "**-0.6667**" in md
    assert whatif_markdown(groups, 5) == "" and whatif_markdown([], 0) == ""


def whatif_rows(md):
    rows = [line for line in md.splitlines() if line.startswith("| ") and line[2].isdigit()]
    return [[float(c) for c in line.strip("|").split("|")[1:]] for line in rows]


def test_an_offset_leaves_the_leave_one_out_column_and_moves_reinforce():
    groups = [make_group([0.2, 0.1, 0.2, 0.6]), make_group([1.0, 0.0, 0.5, 0.5], index=1)]
    plain, shifted = whatif_markdown(groups, 1), whatif_markdown(groups, 1, offset=2.0)
    columns = ["r", "rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean", "reinforce"]
    for a, b in zip(whatif_rows(plain), whatif_rows(shifted), strict=True):
        a, b = dict(zip(columns, a, strict=True)), dict(zip(columns, b, strict=True))
        assert b["r"] == pytest.approx(a["r"] + 2.0) and b["reinforce"] == pytest.approx(a["reinforce"] + 2.0)
        for name in ("rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean"):
            assert b[name] == pytest.approx(a[name], abs=1.01e-3), name  # up to the shown 3 decimals' rounding
    assert "**With an offset C = +2 added to every r**" in shifted and "(r + C) − (b + C) = r − b" in shifted
    assert "With an offset" not in plain


def test_the_toy_panel_shows_the_exact_table_and_refuses_bad_inputs():
    from types import SimpleNamespace

    from rloo_demo.errors import InputError
    from rloo_demo.ui.tabs import toy_panel

    ui = SimpleNamespace(plot="plot", table="table")
    out = toy_panel.toy_view(ui, 0.0, 4, 1.0)
    table = out["table"]
    assert "True gradient d/dη E[r] = **-0.045000**" in table and "K = 4, C = 1" in table
    assert "| `rloo` | -0.045000 | +0.000000 | 0.001987 | 1× |" in table
    assert "| `dr_grpo` | -0.033750 | +0.011250 |" in table  # biased by (K−1)/K
    assert "| `reinforce` | -0.045000 | +0.000000 | 0.5823 | 293× |" in table
    figure = json.loads(out["plot"].plot)
    assert figure["layout"]["yaxis"]["type"] == "log" and len(figure["data"]) == 6
    for bad in ((float("nan"), 4, 0), (0, 9, 0), (0, 3.5, 0), (0, 4, 1e9), ("x", 4, 0), (None, 4, 0), (0, True, 0)):
        with pytest.raises(InputError):
            toy_panel.toy_view(ui, *bad)


def test_the_rollouts_tabs_offset_box_refuses_what_it_cannot_use(tmp_path):
    from rloo_demo.store.folder import RunFolder
    from rloo_demo.ui.app import build_app

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="off"))
    run.append_rollouts(2, [make_group([0.2, 0.1, 0.2, 0.6]), make_group([1.0, 0.0, 0.5, 0.5], index=1)])
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    try:
        demo = build_app(controller)
        changed = next(fn.fn for fn in demo.fns.values() if fn.api_name == "rollouts_whatif")
        keep = next(fn.fn for fn in demo.fns.values() if fn.fn.__name__ == "keep_offset")
        toy = next(fn.fn for fn in demo.fns.values() if fn.api_name == "toy")
        (shown,) = changed("off", 2, "Prompt 2: p", 1.5, "en").values()
        assert "**With an offset C = +1.5 added to every r**" in shown and "prompt 2" in shown
        assert list(keep("off", 2, "Prompt 2: p", 1.5, shown, "en").values()) == [{"__type__": "update"}]
        (redrawn,) = keep("off", 2, "Prompt 2: p", 1.5, whatif_markdown([], 0), "en").values()
        assert redrawn == shown  # a tick drew it without the offset: drawn again with it
        for bad in (float("nan"), float("inf"), 100.5, "1", None, True, [1]):
            (text,) = changed("off", 2, "Prompt 2: p", bad, "en").values()
            # named by the box's label, quoted: “What if every reward had an offset C?” must be a finite number
            label = i18n.t("en", "common.quoted", text=i18n.t("en", "rollouts.whatif_offset"))
            assert text.startswith(f"**Error:** {label} must be "), bad
            assert list(keep("off", 2, "Prompt 2: p", bad, shown, "en").values()) == [{"__type__": "update"}]

        def by_id(out):
            return {getattr(k, "elem_id", None) or type(k).__name__: v for k, v in out.items()}

        drawn = by_id(toy(0.0, 4, 0.0, "ru"))
        assert "Истинный градиент" in drawn["toy-table"] and drawn["State"] == (0.0, 4, 0.0)
        refused = by_id(toy(0.0, 99, 0.0, "en", (0.5, 3, 1.0)))
        error = refused["toy-table"]
        assert error.startswith("**Error:**") and f"“{i18n.t('en', 'toy.k')}” must be between 2 and 8" in error
        # the sliders go back to what the table shows: slider, box and table never show three Ks
        assert (refused["toy-eta"], refused["toy-k"], refused["toy-offset"]) == (0.5, 3, 1.0)
    finally:
        controller.close()


def test_the_rollouts_tabs_offset_box_draws_the_picked_step_and_group_in_the_pages_language(tmp_path):
    """The what-if table of the step and the group picked (by their label in the page's language), not of the
    latest step or the first group; a step with no rollouts draws nothing."""
    from rloo_demo.store.folder import RunFolder
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.views.rollouts import group_label

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="two"))
    step2 = [make_group([0.2, 0.1, 0.2, 0.6]), make_group([1.0, 0.0, 0.5, 0.5], index=1)]
    step3 = [make_group([0.9, 0.3, 0.3, 0.3]), make_group([0.0, 0.8, 0.4, 0.1], index=1)]
    for g in step3:
        g["step"] = 3
    run.append_rollouts(2, step2)
    run.append_rollouts(3, step3)
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    try:
        demo = build_app(controller)
        changed = next(fn.fn for fn in demo.fns.values() if fn.api_name == "rollouts_whatif")
        second = group_label(step2[1], "ru")
        assert second != group_label(step2[1], "en")
        (shown,) = changed("two", 2, second, 0.5, "ru").values()
        assert shown == whatif_markdown(step2, 1, "ru", 0.5) != whatif_markdown(step2, 0, "ru", 0.5)
        assert shown != whatif_markdown(step2, 1, "en", 0.5)
        (latest,) = changed("two", 3, group_label(step3[1], "en"), 0.5, "en").values()
        assert latest == whatif_markdown(step3, 1, "en", 0.5) != whatif_markdown(step2, 1, "en", 0.5)
        assert list(changed("two", 7, second, 0.5, "ru").values()) == [""]  # no such step: nothing to draw
    finally:
        controller.close()


def test_another_group_drops_the_selection_from_the_arithmetic_and_the_token_view_in_the_pages_language(tmp_path):
    from rloo_demo import i18n
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.tabs.rollouts_view import no_token_selection

    controller = Controller(Runner(str(tmp_path), watchdog=False))
    try:
        drop = next(fn.fn for fn in build_app(controller).fns.values() if fn.api_name == "drop_selection")
        for locale in ("ru", "en"):
            values = sorted(map(str, drop(locale).values()))
            want = sorted(["None", i18n.t(locale, "common.select_row"), str(no_token_selection(locale)), ""])
            assert values == want
        assert sorted(map(str, drop().values())) == want  # the default: English
        assert i18n.t("ru", "common.select_row") != i18n.t("en", "common.select_row")
    finally:
        controller.close()


def test_arithmetic_names_the_kl_that_shaped_the_reward_and_a_missing_baseline():
    g = make_group([1.0, 0.0, 0.5, 0.5], kl=(0.8, 0.5, 0.6))
    md = arithmetic_markdown(g, 0)
    assert "k1 = Σ(log π − log π_ref) = +0.8000" in md and "k2" in md and "k3" in md
    assert "**k1 shaped the reward**" in md
    assert "KL estimators" not in arithmetic_markdown(make_group([1.0, 0.0]), 0)  # beta = 0: none recorded
    g["baseline_kind"] = "none"
    assert "baseline = **0**" in arithmetic_markdown(g, 0)


def test_live_collapse_warning_on_the_latest_steps():
    healthy = [{"step": s, "judges/distinct_2": 0.9, "judges/repetition": 0.01} for s in range(1, 20)]
    assert live_collapse_warning(healthy) is None
    collapsed = healthy + [{"step": 20 + s, "judges/distinct_2": 0.1, "judges/repetition": 0.7} for s in range(5)]
    assert "collapsed into repetition" in live_collapse_warning(collapsed)
    assert live_collapse_warning([{"step": 1, "reward": 0.1}]) is None


def test_meter_estimate_says_what_the_meter_costs():
    assert meter_estimate_text(RunConfig(), 0.3) == ""
    text = meter_estimate_text(RunConfig(max_steps=150, variance_every=50), 0.3)
    assert "3 measurements," in text and "%" in text
    assert "1 measurement," in meter_estimate_text(RunConfig(max_steps=150, variance_every=100), 0.3)


def test_compare_summary_shows_the_judges_and_the_warning():
    result = {
        "trained_on": ["vader_compound"],
        "seed": 0,
        "base": [{"reward": 0.1}],
        "trained": [{"reward": 0.9}],
        "judges": {
            "base": {"distinct_2": 0.9, "repetition": 0.0, "base_perplexity": 130.0},
            "trained": {"distinct_2": 0.1, "repetition": 0.8, "base_perplexity": 2000.0},
        },
        "collapse_warning": "Warning: the completions have collapsed into repetition (x)",
    }
    md = compare_summary(result)
    assert "distinct-2 0.90 → 0.10" in md and "perplexity 130 → 2000" in md and "collapsed into repetition" in md


# --- the arena's summary --------------------------------------------------------------------------------------


def evaluation(gain, kl=5.0, collapsed=False):
    base = [0.0, 0.2, 0.1, 0.1, -0.1, 0.3]
    return {
        "samples_per_prompt": 2,
        "base_rewards": base,
        "trained_rewards": [b + gain for b in base],
        "kl_trained_vs_base": kl,
        "judges": {"trained": {"distinct_2": 0.8, "repetition": 0.02}},
        "collapse_warning": "w" if collapsed else None,
    }


def test_per_prompt_gains_and_the_two_level_interval():
    assert per_prompt_gains(evaluation(0.3)) == pytest.approx([0.3, 0.3, 0.3])
    lo, hi = hierarchical_interval([[0.1, 0.2, 0.3], [0.5, 0.6, 0.7]])
    assert 0.1 < lo < 0.4 < hi < 0.7  # seeds disagree: the interval spans both
    lo, hi = hierarchical_interval([[0.4, 0.4], [0.4, 0.4]])
    assert lo == hi == pytest.approx(0.4)


def test_summary_table_has_one_row_per_estimator_and_the_required_columns():
    models = {"policy": 1350400, "reference": {"kind": "separate copy", "parameters": 1350400}, "rewards": []}
    runs = [
        {
            "estimator": e,
            "seed": s,
            "step_seconds": 0.3,
            "peak_rss_mb": 700,
            "models": models,
            "evaluation": evaluation(g, collapsed=(e == "reinforce")),
        }
        for e, g in (("rloo", 0.3), ("grpo", 0.25), ("reinforce", 0.1))
        for s in (42, 43)
    ]
    rows = summarize(runs)
    assert [r["estimator"] for r in rows] == ["rloo", "grpo", "reinforce"]
    assert rows[0]["gain"] == pytest.approx(0.3) and rows[0]["runs"] == 2 and rows[2]["collapsed"] == 2
    table = markdown_table(rows, "settings line")
    header = table.splitlines()[4]  # under the settings and the models held, said once for all three
    for column in ("held-out gain [95% CI]", "KL to base", "mean step time", "peak RSS"):
        assert column in header
    assert table.splitlines()[2].startswith("Models held in memory, by every estimator")
    assert table.count("policy 1.35M + reference 1.35M (separate copy)") == 1
    assert PPO_NOTE in table and BETA_NOTE in table and "(2 collapsed)" in table
    assert "| ppo (not run) |" in table and "value network of about the policy's size (1.35M)" in table


# --- controller doors --------------------------------------------------------------------------------------------


def test_arena_summaries_through_the_controller(tmp_path):
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    try:
        assert controller.arenas() == []
        summary = {"settings": "s <b>x</b>", "rows": summarize([]), "runs": [{"run": "gone"}, {"run": "../etc"}]}
        (tmp_path / "arena-20260101-120000.json").write_text(json.dumps(summary))
        (tmp_path / "arena-notes.json").write_text("{}")  # not an arena name: not listed
        assert controller.arenas() == ["arena-20260101-120000"]
        shown = controller.arena("arena-20260101-120000")
        assert "&lt;b&gt;" in shown["markdown"] and "<b>" not in shown["markdown"]  # inert
        assert shown["runs"] == []  # neither run is on disk
        for hostile in ("../arena-20260101-120000", "arena-notes", None, 3, "arena-20260101-120000.json"):
            with pytest.raises(NotFound):
                controller.arena(hostile)
        (tmp_path / "arena-20260101-120001.json").write_text("not json")
        with pytest.raises(NotFound, match="cannot be read"):
            controller.arena("arena-20260101-120001")
    finally:
        controller.close()


def test_public_server_refuses_a_meter_that_would_cost_more_than_its_budget(tmp_path):
    controller = Controller(Runner(str(tmp_path), limits=PUBLIC, watchdog=False))
    try:
        with pytest.raises(Exception, match="variance_every"):
            controller.parse_settings({"variance_every": 1})
        assert controller.parse_settings({"variance_every": PUBLIC.min_variance_every}).variance_every == 55
        assert controller.parse_settings({"estimator": "grpo"}).estimator == "grpo"
        estimate = controller.estimate(
            {
                "policy": "embedded:tiny-imdb-gpt2",
                "rewards": ["vader_compound"],
                "w_vader_compound": 1.0,
                "num_generations": 2,
                "prompts_per_step": 4,
                "max_steps": 150,
                "max_new_tokens": 24,
                "learning_rate": 5e-4,
                "beta": 0.1,
                "temperature": 1.0,
                "seed": 0,
                "lora_r": 8,
                "variance_every": 55,
            }
        )
        assert "Gradient-variance meter: 2 measurements" in estimate and "K = 2" in estimate
    finally:
        controller.close()


# --- the arena's rounds, without training ------------------------------------------------------------------------


def test_each_seed_round_of_the_arena_trains_with_its_own_seed(tmp_path, monkeypatch):
    """3 seeds x 2 estimators: the arena's child commands, read back through the CLI's own parser, are 6 trainings
    with seeds base, base+1, base+2 (each estimator once per seed) and otherwise the base settings; each is then
    evaluated, and the summary records the seed each run really used."""
    from pathlib import Path

    from rloo_demo import arena
    from rloo_demo.cli import build_parser, config_from_args

    trained, evaluated = [], []

    def fake_run(command, log):
        assert command[1:3] == ["-m", "rloo_demo"]
        args = build_parser().parse_args(command[3:])
        if command[3] == "train":
            config = config_from_args(args)
            trained.append(config)
            folder = Path(config.output_dir) / config.run_name
            folder.mkdir(parents=True, exist_ok=True)  # (a repeated name is for the asserts below to report)
            (folder / "status.json").write_text(json.dumps({"status": "finished"}))
            (folder / "metrics.jsonl").write_text('{"step": 1, "step_time": 1.0}\n{"step": 2, "step_time": 0.5}\n')
        else:
            assert command[3] == "evaluate"
            evaluated.append(Path(args.run).name)
            seed = int(Path(args.run).name.rsplit("-s", 1)[1])
            result = {"samples_per_prompt": 1, "base_rewards": [0.0, 0.0], "trained_rewards": [seed, seed]}
            (Path(args.run) / "evaluation.json").write_text(json.dumps(result))
        return 0, 123.0

    monkeypatch.setattr(arena, "_run", fake_run)
    base = RunConfig(seed=7, max_steps=5, prompts_per_step=2, num_generations=4, learning_rate=1e-3)
    summary = arena.run_arena(base, ["rloo", "reinforce"], 3, str(tmp_path), eval_prompts=4, echo=lambda *_: None)

    assert len(trained) == 6
    assert [(c.seed, c.estimator) for c in trained] == [
        (7, "rloo"), (7, "reinforce"), (8, "rloo"), (8, "reinforce"), (9, "rloo"), (9, "reinforce")
    ]  # fmt: skip
    assert len({c.run_name for c in trained}) == 6
    assert all(c.run_name.endswith(f"-{c.estimator}-s{c.seed}") for c in trained)
    same = {"seed", "estimator", "run_name", "output_dir"}
    expected = {k: v for k, v in base.to_dict().items() if k not in same}
    for c in trained:
        assert {k: v for k, v in c.to_dict().items() if k not in same} == expected
        assert c.output_dir == str(tmp_path)
    assert evaluated == [c.run_name for c in trained]
    assert [(r["estimator"], r["seed"]) for r in summary["runs"]] == [(c.estimator, c.seed) for c in trained]
    rows = {r["estimator"]: r for r in summary["rows"]}
    assert rows["rloo"]["seeds"] == rows["reinforce"]["seeds"] == [7, 8, 9]
    assert rows["rloo"]["gain"] == pytest.approx(8.0)  # the mean of the gains 7, 8 and 9 the evaluations reported
    assert "3 seeds (7..9)" in summary["settings"]
