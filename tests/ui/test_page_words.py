"""What the page says, in its language and truthfully: a refusal of the Train form on a Russian page of a public
server is Russian throughout (the label and the message), the empty page's plots say that no run has started and
name no setting the form does not have, a long run is warned about before Start and an hour reads "3 h 45 min",
Evaluate counts its samples in each language's plural forms and says which way is good, the Runs tab's metric
picker shows names, and each refusal of the form is shown once.

``python -m pytest tests/ui/test_page_words.py`` (about half a minute).
"""

import json
import re

import pytest
from apputil import app_for, call_event, running_app

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.public.limits import PUBLIC
from rloo_demo.ui.forms import FORM_FIELDS, defaults, field_label
from rloo_demo.ui.views import estimate_text

OTHERS = ("ru", "ka", "ro")


def form(**changes) -> list:
    values = defaults() | changes
    return [values[name] for name in FORM_FIELDS]


def latin_words(text: str) -> list[str]:
    """The Latin-script words of a text, but for the names a Russian text keeps (K, NaN)."""
    return [w for w in re.findall(r"[A-Za-z]+", text) if w not in {"K", "NaN"}]


# ----------------------------------------------------------------------------- a refusal, wholly in Russian


@pytest.fixture(scope="module")
def public_app(space_runs_dir):
    with running_app(space_runs_dir, limits=PUBLIC) as served:
        yield served


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (  # K over the public cap: the cap and the value named
            {"num_generations": 9},
            "num_generations",
            i18n.t("ru", "limits.cap.num_generations", limit=PUBLIC.max_k, value=9),
        ),
        (  # a weight past the limit
            {"w_vader_compound": 5000},
            "w_vader_compound",
            i18n.t("ru", "cfg.weight_range", lo="-1000", hi="1000", value="5000"),
        ),
        ({"w_vader_compound": None}, "w_vader_compound", i18n.t("ru", "form.weight_empty")),  # an emptied weight
    ],
    ids=["k-over-cap", "weight-over-limit", "weight-emptied"],
)
def test_a_refusal_of_the_train_form_on_a_russian_public_page_is_russian_throughout(
    public_app, changes, field, message
):
    url, controller = public_app
    session = f"ru-{field}-{changes[field]}"
    call_event(url, "page_load", ["cid-" + session, "ru"], session_hash=session)
    out = call_event(url, "train_start", ["cid-" + session, *form(**changes)], session_hash=session)
    refusal = out[2]  # the form's error box
    assert refusal == f"{i18n.t('ru', 'train.not_started')}\n\n- **{field_label(field, 'ru')}**: {message}", refusal
    body = refusal.replace(field_label(field, "ru"), "")  # the label is "вес: vader", a reward's name in it
    assert latin_words(body) == [], body
    assert not controller.runner.active()
    # the estimate says it the same way, in the same box, before Start is pressed
    estimate = call_event(url, "train_estimate", form(**changes), session_hash=session)
    assert estimate[1] == f"{i18n.t('ru', 'train.form_refused')}\n\n- **{field_label(field, 'ru')}**: {message}"
    assert estimate[0] == ""  # not beside the estimate as well: each problem is shown once


# ----------------------------------------------------------------------------- the empty page's plots


@pytest.fixture(scope="module")
def empty_page(tmp_path_factory):
    controller, demo, handler, component = app_for(tmp_path_factory.mktemp("empty"))
    yield demo, handler, component
    controller.close()


PLOT_IDS = (
    "reward-plot",
    "kl-plot",
    "grad-norm-plot",
    "entropy-plot",
    "length-plot",
    "zero-signal-plot",
    "kl-estimators-plot",
    "judges-plot",
    "variance-plot",
    "cosine-plot",
)


def notes(plot) -> list[str]:
    figure = json.loads(plot.plot)
    return [a["text"].replace("<br>", " ") for a in figure["layout"].get("annotations", [])]


@pytest.mark.parametrize("locale", i18n.LOCALES)
def test_before_any_run_every_plot_says_no_run_has_started_and_names_no_setting(empty_page, locale):
    """The page as it loads with no run: each of the ten plots says so plainly. None claims "beta = 0" while the
    form says 0.05, or that a metric "was not logged in this run" of a run that does not exist."""
    _, handler, component = empty_page
    loaded = handler["page_load"](None, "cid-empty", locale)
    form_values = defaults()
    for elem_id in PLOT_IDS:
        shown = notes(loaded[component[elem_id]])
        assert shown == [i18n.t(locale, "plot.no_run")], (elem_id, shown)
        for note in shown:
            # a setting a note names by "name = value" must be the form's value
            for name, value in re.findall(r"\b(beta|β|K)\s*=\s*([\d.]+)", note):
                setting = {"beta": "beta", "β": "beta", "K": "num_generations"}[name]
                assert float(value) == form_values[setting], (elem_id, note)
            assert i18n.t(locale, "plot.metric_missing", key="grad_norm").split("grad_norm")[-1] not in note


def test_a_run_that_has_not_logged_a_step_says_so_not_that_its_kl_is_off():
    """The first seconds of a run (no record yet): "no step logged yet", whatever its beta."""
    from rloo_demo.ui.tabs.train import figures

    for plot in figures([], None, "en", started=True):
        assert notes(plot) == [i18n.t("en", "plot.no_steps")]
    kl = figures([{"step": 1, "reward": 0.1}], None, "en")[1]  # a run that logged no KL: its beta was 0
    assert notes(kl) == [i18n.t("en", "plot.kl_missing")]


# ----------------------------------------------------------------------------- a long run, hours


@pytest.mark.parametrize("locale", i18n.LOCALES)
def test_a_run_over_a_quarter_hour_is_warned_about_and_hours_read_as_hours(locale):
    long = estimate_text(RunConfig(max_steps=5000), 2.7, None, locale)  # 5,000 steps of 2.7 s: 3 h 45 min
    expected = i18n.t(locale, "time.hours", hours=3, minutes=45)
    assert f"**{expected}**" in long and ":" not in long.split("**")[1], long
    assert i18n.t(locale, "estimate.long", total=expected, minutes=15) in long
    short = estimate_text(RunConfig(max_steps=150), 0.65, None, locale)
    assert i18n.t(locale, "estimate.long", total="", minutes=15).split("(")[0] not in short
    assert "**1:41**" in short  # under an hour: minutes and seconds
    # on a server whose budget cuts the run, the budget's note says it and the long-run note stays out
    cut = estimate_text(RunConfig(max_steps=5000), 2.7, 300, locale)
    assert i18n.t(locale, "estimate.long", total=expected, minutes=15) not in cut


# ----------------------------------------------------------------------------- Evaluate's words


@pytest.mark.parametrize(
    ("locale", "prompts", "samples", "caption"),
    [
        ("en", 1, 1, "1 held-out prompt × 1 sample, seed 3"),
        ("en", 32, 4, "32 held-out prompts × 4 samples, seed 3"),
        ("ru", 1, 1, "1 отложенный промпт × 1 сэмпл, сид 3"),
        ("ru", 32, 2, "32 отложенных промпта × 2 сэмпла, сид 3"),
        ("ru", 25, 5, "25 отложенных промптов × 5 сэмплов, сид 3"),
        ("ro", 1, 1, "1 prompt rezervat × 1 eșantion, sămânța 3"),
        ("ro", 32, 2, "32 de prompturi rezervate × 2 eșantioane, sămânța 3"),
        ("ka", 32, 4, "32 გადადებული პრომპტი × 4 ნიმუში, seed 3"),
    ],
)
def test_evaluate_counts_its_prompts_and_samples_in_the_languages_plural_forms(locale, prompts, samples, caption):
    from rloo_demo.ui.views.compare import eval_report_html

    result = {"num_prompts": prompts, "samples_per_prompt": samples, "seed": 3, "reward_names": ["vader_compound"]}
    assert f"<caption>{caption}</caption>" in eval_report_html(result, locale)


@pytest.mark.parametrize("locale", i18n.LOCALES)
def test_evaluate_says_which_way_is_good_for_distinct_2_and_perplexity(locale):
    from rloo_demo.ui.views.compare import eval_report_html

    judges = {"distinct_2": 0.8, "repetition": 0.1, "base_perplexity": 40.0}
    result = {"num_prompts": 8, "seed": 0, "judges": {"base": judges, "trained": judges}}
    report = eval_report_html(result, locale)
    for key, en_direction in (("eval.distinct", "higher: more varied text"), ("eval.perplexity", "lower: text")):
        label = i18n.t(locale, key)
        assert label in report
        assert en_direction in i18n.t("en", key)  # the English says the direction; each locale its own words
        assert locale == "en" or label != i18n.t("en", key)


# ----------------------------------------------------------------------------- the metric picker


def test_the_overlays_metric_picker_shows_names_not_logged_keys(empty_page):
    from rloo_demo.ui.tabs.runs import OVERLAY_METRICS, metric_key

    demo, _, _ = empty_page
    picker = next(
        b
        for b in demo.blocks.values()
        if type(b).__name__ == "Dropdown" and getattr(getattr(b, "label", None), "key", None) == "runs.metric"
    )
    labels = [getattr(label, "key", label) for label, _ in picker.choices]
    assert [value for _, value in picker.choices] == OVERLAY_METRICS
    assert labels == [metric_key(m) for m in OVERLAY_METRICS]  # translated keys, not "completions/mean_length"
    for locale in i18n.LOCALES:
        shown = [i18n.t(locale, key) for key in labels]
        assert len(set(shown)) == len(shown), shown  # two metrics never read alike
        assert not any("/" in s or "_" in s for s in shown), shown  # no key as TRL logs it


def test_a_language_switch_writes_a_refused_form_once_in_the_new_language(empty_page):
    """Switching the language writes the estimate again: for a form the server refuses, the refusal goes to the
    form's error box in the new language, and the estimate stays empty (not the refusal a second time)."""
    _, handler, component = empty_page
    out = handler["page_language"]("ka", None, 0.6, *form(num_generations=1000))
    refusal = out[component["form-error"]]
    assert out[component["run-estimate"]] == ""
    assert refusal.startswith(i18n.t("ka", "train.form_refused"))
    assert f"**{field_label('num_generations', 'ka')}**: " in refusal
    fine = handler["page_language"]("ka", None, 0.6, *form())
    assert fine[component["form-error"]] == "" and fine[component["run-estimate"]].startswith(
        i18n.t("ka", "estimate.line").split("{")[0]
    )
