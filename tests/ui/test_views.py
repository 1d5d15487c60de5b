"""Every text the views write (ui/views/), word for word, on inputs chosen so that the plausible wrong versions
differ: a negative and a zero advantage beside a positive one, K = 3 and 4, β = 0 and 0.07, a missing token value,
a hostile token, several snapshots, a cut prompt, English and two other languages.

The views' logic has its own tests (test_token_views, test_rollouts_views, test_lab_views, ...), each against a
value it computes; this file is the net under their wording and formats: a changed sentence, number format,
class name or column order fails here. After a deliberate change, read the diff of the rewritten file:
``UPDATE_GOLDEN=1 pytest tests/ui/test_views.py`` rewrites ``tests/golden/views.json`` and checks nothing.
"""

import json
import os
from pathlib import Path

import pytest
from factories import collapsing_records as _records

from rloo_demo.config import RunConfig
from rloo_demo.server.estimate import Speed
from rloo_demo.store import tokens as token_math
from rloo_demo.store.summary import summarize
from rloo_demo.toy import exact_table
from rloo_demo.ui import views
from rloo_demo.ui.views import common, probe, rollouts, runs, tokens, train
from rloo_demo.ui.views import compare as compare_views

GOLDEN = Path(__file__).parent.parent / "golden" / "views.json"
EVIL = "<b onmouseover=alert(1)>{x}$y</b>"


def _completion(text, pieces, before, after, ref, entropy, *, shaped, baseline, advantage, scores, beta=0.07):
    kl = sum(b - r for b, r in zip(before, ref or before, strict=True) if r is not None) if beta else 0.0
    return {
        "text": text,
        "num_tokens": len(pieces),
        "scores": scores,
        "weighted_reward": shaped + beta * kl,
        "kl": kl,
        "kl_k2": 0.5 * kl * kl,
        "kl_k3": abs(kl) * 0.9,
        "kl_penalty": -beta * kl,
        "shaped_reward": shaped,
        "baseline": baseline,
        "raw_advantage": shaped - baseline,
        "advantage": advantage,
        "token_texts": pieces,
        "token_logp": before,
        "token_logp_after": after,
        "token_ref_logp": ref,
        "token_entropy": entropy,
    }


def _group(beta=0.07, group=1, step=12):
    """One prompt's K = 3 completions: advantages +, −, and one that prints as ±0.000."""
    shaped = [0.61, -0.25, 0.18]
    baselines = [(sum(shaped) - r) / 2 for r in shaped]
    c = [
        _completion(
            " a great film, truly",
            [" a", " great", EVIL, " truly", "<|endoftext|>"],
            [-2.1, -3.4, -6.0, -1.2, -0.3],
            [-1.9, -2.6, -6.4, -1.1, -0.3],
            [-2.3, -3.9, -5.5, None, -0.4] if beta else None,
            [3.2, 4.1, 5.5, 0.7, 1.9],
            shaped=shaped[0],
            baseline=baselines[0],
            advantage=shaped[0] - baselines[0],
            scores={"vader_compound": 0.66, "length_penalty": -0.1},
            beta=beta,
        ),
        _completion(
            " boring and long",
            [" boring", " and", " long"],
            [-4.0, -0.9, -2.2],
            [-4.3, -1.0, -2.0],
            [-3.6, -1.1, -2.1] if beta else None,
            [2.0, 0.4, 3.3],
            shaped=shaped[1],
            baseline=baselines[1],
            advantage=shaped[1] - baselines[1],
            scores={"vader_compound": -0.2, "length_penalty": -0.05},
            beta=beta,
        ),
        _completion(
            "",
            [],
            [],
            [],
            [] if beta else None,
            [],
            shaped=shaped[2],
            baseline=baselines[2],
            advantage=0.00004,
            scores={"vader_compound": 0.2, "length_penalty": 0.0},
            beta=beta,
        ),
    ]
    if not beta:
        for x in c:
            del x["token_ref_logp"]
    return {
        "step": step,
        "group": group,
        "prompt": "I watched <this> & thought",
        "beta": beta,
        "weights": {"vader_compound": 1.0, "length_penalty": 0.5},
        "completions": c,
    }


def _zero_group():
    """A completion the update left alone and the reference agrees with: every Δ log π, k1 and k3 is 0, the
    advantage is exactly 0, two tokens tie, and its pieces hold a newline, a tab and nothing at all."""
    same = [-1.0, -2.0, -0.5, -0.1]
    c = _completion(
        " a b\n\t",
        [" a", " b", "\n\t", ""],
        same,
        list(same),
        list(same),
        [1.5, 1.5, 0.5, 2.5],
        shaped=0.2,
        baseline=0.2,
        advantage=0.0,
        scores={"vader_compound": 0.2, "length_penalty": 0.0},
    )
    return {**_group(group=3), "completions": [c]}


def _normalized_group():
    g = _group(group=0)
    g["normalize_advantages"] = True
    g["normalization"] = {"mean": 0.02, "std": 0.31, "eps": 1e-4}
    return g


def _silent_group():
    g = _group(group=2)
    for c in g["completions"]:
        c["advantage"] = 0.00003
    g["baseline_kind"] = "none"
    return g


def _probe_result(cut=False):
    steps = [
        {
            "label": "base policy (step 0)",
            "samples": [{"text": "dull", "reward": -0.42}, {"text": "", "reward": 0.01}],
            "mean_reward": -0.205,
        },
        {
            "label": "step 20",
            "samples": [{"text": EVIL, "reward": 0.3}, {"text": "fine", "reward": 0.07}],
            "mean_reward": 0.185,
        },
        {"label": "step 40", "samples": [{"text": "good", "reward": 0.55}], "mean_reward": 0.55},
        {
            "label": "final (step 60)",
            "samples": [{"text": "great", "reward": 0.91}, {"text": "ok", "reward": -0.06}],
            "mean_reward": 0.425,
        },
        {"label": "my <own> column", "samples": [], "mean_reward": None},
        {"label": "now (step 61, training)", "samples": [], "mean_reward": None},
    ]
    result = {"prompt": "The plot <was>", "seed": 7, "num_samples": 2, "snapshot_every": 20, "kept": 3, "steps": steps}
    if cut:
        result["prompt_cut"] = {"tokens": 1234, "context": 1024, "dropped": 222}
    return result


def _samples(shift=0.0):
    return [
        {"reward": 0.5 + shift, "scores": {"vader_compound": 0.5 + shift, "length_penalty": -0.125}, "text": EVIL},
        {"reward": -0.25 + shift, "scores": {"vader_compound": -0.25 + shift, "length_penalty": 0.0}, "text": ""},
    ]


def _eval_result():
    return {
        "base_mean_reward": 0.1234,
        "trained_mean_reward": 0.5678,
        "difference": 0.4444,
        "difference_ci95": [0.31, 0.58],
        "trained_on": ["vader_compound", "length_penalty"],
        "heldout_scorers": ["classifier"],
        "per_function": {
            "vader_compound": {"base": 0.2, "trained": 0.7},
            "classifier": {"base": 0.45, "trained": 0.4},
            "broken": {"base": None, "trained": 0.1},
        },
        "kl_trained_vs_base": 1.2345,
        "judges": {
            "base": {"distinct_2": 0.91, "repetition": 0.05, "base_perplexity": 41.3},
            "trained": {"distinct_2": 0.12, "repetition": 0.66, "base_perplexity": 912.7},
        },
        "collapse_warning": "collapsed (English, as the engine wrote it)",
        "num_prompts": 16,
        "samples_per_prompt": 2,
        "seed": 5,
        "samples": [
            {"prompt": "It <was>", "base": "meh", "trained": EVIL},
            {"prompt": "Then", "base": "", "trained": "ok"},
        ],
    }


def _compare_result():
    return {
        "base": _samples(),
        "trained": _samples(0.3),
        "trained_on": ["vader_compound", "length_penalty"],
        "seed": 11,
        "judges": _eval_result()["judges"],
        "collapse_warning": "collapsed",
        "prompt_cut": {"tokens": 5000, "context": 1024, "dropped": 3977},
    }


def _summaries():
    return [
        {
            "name": "run-b",
            "label": "mine <b>",
            "status": "finished",
            "steps": 60,
            "max_steps": 60,
            "reward_first": 0.12345,
            "reward_last": 0.6789,
            "kl_last": 0.123456,
            "has_model": True,
            "note": "n" * 100,
            "error": None,
        },
        {
            "name": "run-a",
            "label": None,
            "status": "failed",
            "steps": 3,
            "max_steps": None,
            "reward_first": None,
            "reward_last": None,
            "kl_last": None,
            "has_model": False,
            "note": "short",
            "error": "E" * 200,
        },
        {"name": "run-c", "status": "weird<status>", "steps": 0, "has_model": False},
    ]


def _summary():
    """The store's own summary of the records, two steps a window (first 2 -> last 2), with a length only late."""
    records = [dict(r, **({"completions/mean_length": 20.0 - r["step"]} if r["step"] > 3 else {})) for r in _records()]
    return summarize(records, window=2)


SPEED = Speed(load=12.0, first=3.5, step=0.8, source="run-7", scaled=True)


def _cases(locale):
    """name -> the view's output in ``locale``."""
    g, g0 = _group(), _group(beta=0.0)
    cases = {}
    for m in tokens.MEASURES:
        for i in range(3):
            cases[f"token_spans/{m}/{i}"] = tokens.token_spans_html(g, i, m, locale)
            cases[f"token_note/{m}/{i}"] = tokens.token_note_markdown(g, i, m, locale)
        cases[f"token_spans_beta0/{m}"] = tokens.token_spans_html(g0, 0, m, locale)
        cases[f"token_note_beta0/{m}"] = tokens.token_note_markdown(g0, 0, m, locale)
    for m in tokens.MEASURES:
        cases[f"token_spans_zero/{m}"] = tokens.token_spans_html(_zero_group(), 0, m, locale)
        cases[f"token_note_zero/{m}"] = tokens.token_note_markdown(_zero_group(), 0, m, locale)
    cases["token_spans/unknown_measure"] = tokens.token_spans_html(g, 1, "<bad>", locale)
    cases["token_note/unknown_measure"] = tokens.token_note_markdown(g, 1, "<bad>", locale)  # as for delta
    cases["token_spans/no_record"] = tokens.token_spans_html({**g, "completions": [{"text": "x"}]}, 0, "delta", locale)
    cases["token_rows/0"] = tokens.token_rows(g["completions"][0], locale)
    cases["token_colour"] = [
        tokens.token_colour(v, m, s)
        for m in tokens.MEASURES
        for v in (None, -3.0, -0.5, 0, 1)
        for s in (2.0, 0.0, -1.0)
    ]
    cases["probe_html"] = probe.probe_html(_probe_result(), locale)
    cases["probe_html/cut"] = probe.probe_html(_probe_result(cut=True), locale)
    cases["probe_html/none"] = probe.probe_html({"steps": []}, locale)
    cases["probe_note"] = probe.probe_note(_probe_result(), locale)
    cases["probe_note/off"] = probe.probe_note({**_probe_result(), "snapshot_every": 0, "kept": None}, locale)
    cases["probe_note/every"] = probe.probe_note({**_probe_result(), "kept": None}, locale)
    bare = {k: v for k, v in _probe_result().items() if k not in ("num_samples", "prompt")}
    cases["probe_note/no_count"] = probe.probe_note(bare, locale)  # K read from the first policy's samples
    cases["probe_html/no_prompt"] = probe.probe_html(bare, locale)
    cases["probe_note/no_means"] = probe.probe_note({"steps": [{"label": "step 1", "samples": []}]}, locale)
    cases["probe_labels"] = [
        probe.probe_label(x, locale)
        for x in ("base policy (step 0)", "step 5", "final (step 9)", "now (step 3, training)", "<x>", 3)
    ]
    cases["groups_html"] = rollouts.groups_html([_normalized_group(), g, _silent_group()], locale, selected=(1, 1))
    cases["groups_html/empty"] = rollouts.groups_html([], locale)
    cases["group_rows/short"] = rollouts.group_rows(g, text_chars=6, locale=locale)
    cases["group_label"] = rollouts.group_label(g, locale)
    for i in range(3):
        cases[f"arithmetic/{i}"] = rollouts.arithmetic_markdown(g, i, locale)
    cases["arithmetic/normalized"] = rollouts.arithmetic_markdown(_normalized_group(), 1, locale)
    cases["arithmetic/no_baseline"] = rollouts.arithmetic_markdown(_silent_group(), 0, locale)
    cases["arithmetic/beta0"] = rollouts.arithmetic_markdown(g0, 0, locale)
    steps = [_normalized_group(), g, _silent_group()]
    cases["whatif/1"] = rollouts.whatif_markdown(steps, 1, locale)
    cases["whatif/0/offset"] = rollouts.whatif_markdown(steps, 0, locale, offset=1.5)
    cases["heatmap_note"] = rollouts.kl_heatmap_note([g, _silent_group()], locale)
    cases["heatmap_note/none"] = rollouts.kl_heatmap_note([g0], locale)
    cases["advantage_shown"] = [rollouts.shown_advantage(v) for v in (0.00049, -0.00051, 1.23456, -2.0)]
    cases["advantage_class"] = [rollouts.advantage_class(v) for v in (0.0004, 0.0006, -0.0006, float("nan"), True)]
    cases["compare_html"] = compare_views.compare_html(_samples(), "Base <policy>", locale)
    cases["compare_html/one_reward"] = compare_views.compare_html(
        [{"reward": 0.25, "scores": {"vader_compound": 0.25}, "text": "x"}], "Trained", locale
    )
    cases["compare_summary"] = compare_views.compare_summary(_compare_result(), locale)
    cases["compare_summary/plain"] = compare_views.compare_summary(
        {"base": _samples(), "trained": _samples(-0.1), "trained_on": ["vader_compound"], "seed": 2}, locale
    )
    cases["eval_report"] = compare_views.eval_report_html(_eval_result(), locale)
    cases["eval_report/bare"] = compare_views.eval_report_html({"trained_on": None}, locale)
    cases["run_rows"] = runs.run_rows(_summaries(), locale)
    cases["run_headers"] = runs.run_headers(locale)
    cases["toy"] = views.toy_markdown(exact_table(-1.5, 3, 0.5), locale)
    cases["prompt_cut"] = common.prompt_cut_note(
        {"prompt_cut": {"tokens": 1500, "context": 1024, "dropped": "x"}}, locale
    )
    cfg = RunConfig(max_steps=40, num_generations=3, max_new_tokens=24, variance_every=10, beta=0.07)
    cases["estimate"] = train.estimate_text(cfg, 0.8, None, locale)
    cases["estimate/over_budget"] = train.estimate_text(cfg, 0.8, 20.0, locale, speed=SPEED)
    unmeasured = Speed(load=5.0, first=1.0, step=0.8, source=None, scaled=False)
    cases["estimate/in_budget"] = train.estimate_text(cfg, 0.8, 600.0, locale, speed=unmeasured)
    cases["meter_estimate"] = train.meter_estimate_text(cfg, 0.8, locale)
    recs = _records()
    cases["status/running"] = train.status_line("running", recs, 40, 75.0, "run-<1>", None, locale)
    cases["status/stopped"] = train.status_line("stopped", recs[:2], 40, 3.0, "", "budget <spent>", locale)
    cases["status/empty"] = train.status_line("failed", [], 40, None, locale=locale)
    cases["status_words"] = [train.status_word(s, locale) for s in ("running", "finished", "stopped", "failed", "<?>")]
    cases["live_collapse"] = train.live_collapse_warning(recs, locale)
    alerts = train.run_alerts(recs, locale)
    cases["alerts"] = alerts
    cases["alerts_html"] = train.alerts_html(alerts, locale)
    cases["phases"] = [train.phase_line(p, 4.0, 40, locale) for p in ("loading", "preparing", "first_step", "x")]
    cases["summary"] = train.summary_markdown(_summary(), alerts, locale)
    cases["failure"] = train.failure_markdown("CUDA <out> of memory", locale)
    cases["idle"] = train.idle_status(locale)
    cases["prechecks"] = train.prechecks_markdown(["a <warning>", "two"])
    cases["cli"] = train.cli_command(
        RunConfig(
            max_steps=7,
            beta=0.0,
            rewards=["vader_compound", "length_penalty"],
            reward_weights=[1.0, 0.5],
            normalize_advantages=True,
        )
    )
    return cases


LOCALES = ("en", "ka")


def current():
    return {locale: json.loads(json.dumps(_cases(locale))) for locale in LOCALES}


def test_the_cases_exercise_every_branch_they_name():
    """The inputs are what the file says they are (so that the golden file holds the wrong versions apart)."""
    g = _group()
    assert [c["advantage"] > 0 for c in g["completions"]][:2] == [True, False]
    assert rollouts.shown_advantage(g["completions"][2]["advantage"]) == "+0.000"
    alerts = train.run_alerts(_records())
    assert {a["kind"] for a in alerts} == {"collapse", "no_signal"}, alerts
    cases = _cases("en")
    assert "no-signal" in cases["groups_html"] and "data-selected='1'" in cases["groups_html"]
    assert len(cases) > 60
    zero = _zero_group()["completions"][0]
    assert set(token_math.delta_logp(zero)) == {0.0} and set(token_math.token_kl(zero, "k3")) == {0.0}
    assert cases["summary"].count("→") == 6, cases["summary"]  # the header, reward, length, KL, both judges


def test_the_golden_views_file_names_every_case():
    if os.environ.get("UPDATE_GOLDEN"):
        pytest.skip("UPDATE_GOLDEN: the file is being rewritten")
    golden = json.loads(GOLDEN.read_text())
    assert {locale: sorted(golden[locale]) for locale in LOCALES} == {
        locale: sorted(_cases(locale)) for locale in LOCALES
    }


@pytest.mark.parametrize("locale", LOCALES)
def test_every_view_writes_what_the_golden_file_holds(locale):
    now = json.loads(json.dumps(_cases(locale)))
    if os.environ.get("UPDATE_GOLDEN"):  # rewrite and compare nothing: a file is not checked against itself
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[locale] = now
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        pytest.skip(f"UPDATE_GOLDEN: rewrote {locale} in {GOLDEN.name}; read the diff, then run again")
    golden = json.loads(GOLDEN.read_text())[locale]
    changed = [name for name in now if name in golden and now[name] != golden[name]]
    assert changed == [], {name: (golden[name], now[name]) for name in changed[:2]}
