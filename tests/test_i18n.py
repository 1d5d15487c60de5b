"""The page in four languages: every key in every locale with the same placeholders, no visible English left in
the built page, the server's own text and the plots translated, and a locale from a caller always one of four.

``python -m pytest tests/test_i18n.py``

The translation layer (i18n.py) on locale files written here, where the wrong versions differ: a key the
locale lacks (English comes instead), a hostile translation (braces, a placeholder of its own, markup), values that
look like placeholders, a locale sent in any spelling, and a figure whose every text holder is translated."""

import json
import re

import pytest

from rloo_demo import i18n
from rloo_demo.i18n import LOCALES, load, t
from rloo_demo.ui import plots

# ----------------------------------------------------------------------------- i18n


OTHERS = [code for code in LOCALES if code != "en"]
# Text that is the same in every language: names, symbols, code, numbers (explicit, so nothing slips in unseen)
SAME_EVERYWHERE = {
    "Top-p",
    "RLOO",
    "KL k1 = log π − log π_ref",
    "distinct-2 (0..1)",
    "Arena: rloo vs grpo vs reinforce",
    "bf16 autocast (GPU)",
    "examples/rewards.py:keyword_count",
    "This movie was",  # the default prompt: model input for an English model, not page text
    "config.yaml",
    "English",
    "Română",
    "ქართული",
    "Русский",
    "#",
    "K",
}
# Words that a language spells as English does (Romanian's "Arena" and "Prompt" are Romanian words)
SAME_IN = {"ro": {"Arena", "Prompt"}}
TEXT_PROPS = ("label", "info", "placeholder", "value")


def _is_code_or_number(text: str) -> bool:
    if re.fullmatch(r"[\w.-]+/[\w.-]+", text):  # a hub model id
        return True
    return bool(re.fullmatch(r"[\d\s.,:+\-−/%=()\[\]<>_a-z0-9]*", text)) and not re.search(r"[a-z]{3,} [a-z]{3,}", text)


@pytest.mark.parametrize("locale", OTHERS)
def test_every_key_in_every_locale_with_the_same_placeholders(locale):
    en, other = load("en"), load(locale)
    assert set(other) == set(en), (set(en) - set(other), set(other) - set(en))
    for key, text in en.items():
        assert i18n.placeholders(other[key]) == i18n.placeholders(text), key
        assert other[key].strip(), key


def test_static_texts_carry_no_braces_to_the_browser():
    """The browser's message formatter reads {x} as its own placeholder: static text gets its values on the server."""
    from rloo_demo.public.limits import PUBLIC

    sent = i18n.translations(min_variance_every=PUBLIC.min_variance_every)
    for code in LOCALES:
        assert "{" not in sent[code]["train.variance_info_min"]


def _texts(value):
    """Every string inside a component prop (a choice list, a table's headers), translation keys as dicts (a
    choice's label is gradio's ``I18nData`` itself in the built config)."""
    if hasattr(value, "to_dict") and getattr(value, "key", None) is not None:  # gradio.i18n.I18nData
        value = value.to_dict()
    if isinstance(value, str | dict) and not (isinstance(value, dict) and value.get("__type__") is None):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _texts(v)


def _resolve(text, locale):
    if isinstance(text, dict):  # {"__type__": "translation_metadata", "key": ...}
        return load(locale).get(text["key"], load("en")[text["key"]])
    if text.startswith("__i18n__"):
        return _resolve(json.loads(text[len("__i18n__") :]), locale)
    return text


def visible_strings(config, locale) -> list[tuple[str, str]]:
    """(English, in ``locale``) for every visible text of the built page: labels, info, placeholders, Markdown,
    button and tab text, choices and table headers."""
    out = []
    for comp in config["components"]:
        props = comp.get("props", {})
        if props.get("visible") is False or comp.get("type") in ("state", "browserstate", "timer", "api"):
            continue
        values = [props.get(p) for p in TEXT_PROPS if comp.get("type") not in ("number", "slider", "checkbox")]
        values += [props.get("choices"), props.get("headers"), props.get("label")]
        if comp.get("type") == "dataframe" and isinstance(props.get("value"), dict):
            values.append(props["value"].get("headers"))
        for text in _texts(values):
            en = _resolve(text, "en")
            if isinstance(en, str) and en.strip():
                out.append((en, _resolve(text, locale)))
    return out


@pytest.fixture(scope="module")
def page_config(tmp_path_factory):
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(tmp_path_factory.mktemp("runs"))))
    try:
        yield build_app(controller).config
    finally:
        controller.close()


@pytest.mark.parametrize("locale", OTHERS)
def test_no_visible_english_left_in_the_built_page(page_config, locale):
    strings = visible_strings(page_config, locale)
    assert len(strings) > 100  # the whole page was collected, not a corner of it
    left = sorted(
        {
            en
            for en, shown in strings
            if shown == en and en not in SAME_EVERYWHERE | SAME_IN.get(locale, set()) and not _is_code_or_number(en)
        }
    )
    assert left == [], f"English left in {locale}: {left}"


@pytest.mark.parametrize("locale", OTHERS)
def test_server_text_is_written_in_the_page_language(locale):
    from rloo_demo.config import RunConfig
    from rloo_demo.prechecks import prerun_warnings
    from rloo_demo.ui.common import error_markdown
    from rloo_demo.ui.views import estimate_text, status_line

    records = [{"step": 3, "time": 1.5, "reward": 0.25}]
    en_line = status_line("running", records, 10, 12.0, "run-1")
    line = status_line("running", records, 10, 12.0, "run-1", locale=locale)
    assert line != en_line and "3 / 10" in line and "+0.250" in line and "<code>run-1</code>" in line
    assert t(locale, "status.running") in line
    assert estimate_text(RunConfig(), 0.26, 60, locale) != estimate_text(RunConfig(), 0.26, 60)
    warned = prerun_warnings(RunConfig(num_generations=2, temperature=0.3, max_new_tokens=4), locale)
    assert len(warned) == 3 and warned != prerun_warnings(
        RunConfig(num_generations=2, temperature=0.3, max_new_tokens=4)
    )
    assert error_markdown("boom", locale).startswith(t(locale, "common.error"))


def _figure_texts(fig):
    layout = fig["layout"]
    texts = [layout.get("title", {}).get("text")]
    texts += [layout[a].get("title", {}).get("text") for a in layout if a.startswith(("xaxis", "yaxis"))]
    texts += [a.get("text") for a in layout.get("annotations", [])]
    texts += [tr.get("name") for tr in fig["data"]]
    return [x for x in texts if isinstance(x, str) and x]


def _all_figures():
    records = [
        {"step": s, "reward": 0.1 * s, "reward_std": 0.1, "kl": 0.01 * s, "grad_norm": 1.0, "entropy": 2.0,
         "completions/mean_length": 20, "frac_reward_zero_std": 0.0, "frac_raw_score_zero_std": 0.0,
         "kl_k1": 0.1, "kl_k2": 0.1, "kl_k3": 0.1, "judges/distinct_2": 0.9, "judges/repetition": 0.1,
         "rewards/vader_compound/mean": 0.1, "variance/rloo": 1.0, "cosine/rloo": 0.5}
        for s in range(1, 4)
    ]  # fmt: skip
    figs = [plots.reward_figure(records), plots.kl_figure(records), plots.kl_estimators_figure(records)]
    figs += [plots.judges_figure(records), plots.variance_figure(records), plots.cosine_figure(records)]
    figs += list(plots.secondary_figures(records).values())
    figs += [plots.overlay_figure({"a": records}, "loss"), plots.overlay_figure({"a": []}, "kl")]
    figs += [plots.reward_figure([]), plots.kl_figure([]), plots.variance_figure([]), plots.kl_heatmap([])]
    figs += [
        plots.eval_histogram({"base_rewards": [0.1, 0.2], "trained_rewards": [0.3], "difference_ci95": [0.0, 0.2]})
    ]
    group = {
        "prompt": "This movie",
        "step": 2,
        "completions": [{"shaped_reward": 0.1, "baseline": 0.0, "advantage": 0.1}],
    }
    figs += [plots.group_figure(group)]
    curves = {"k": [2, 3], "variance": {"rloo": [0.1, 0.05], "reinforce": [1.0, 0.5]}}
    figs += [plots.toy_variance_figure(curves, 2), plots.toy_variance_figure({})]
    return figs


@pytest.mark.parametrize("locale", OTHERS)
def test_every_plot_text_is_translated(locale):
    """Titles, axis titles, notes and trace names: each a known phrase or pattern; names and keys stay."""
    keep = {"vader_compound", "rloo", "reinforce", "a", "k2", "k3", "distinct-2"}
    figures = _all_figures()
    assert len(figures) > 10  # the loop below has figures to read
    for fig in figures:
        english = _figure_texts(fig)
        shown = _figure_texts(i18n.localize_figure(json.loads(json.dumps(fig)), locale))
        for en, text in zip(english, shown, strict=True):
            assert text != en or en in keep, (locale, en)


@pytest.mark.parametrize("locale", OTHERS)
def test_a_plot_note_naming_a_missing_metric_is_translated(locale):
    """Its placeholder is called ``key``, as is t()'s own argument: the run's plots once failed in every other
    language as soon as a metric was missing (a run's first steps have no grad_norm yet, an older run none)."""
    shown = i18n.plot_text(locale, "'grad_norm' was not logged in this run.")
    assert shown == t(locale, "plot.metric_missing", key="grad_norm") and "grad_norm" in shown
    assert shown != "'grad_norm' was not logged in this run."


def test_a_locale_from_a_caller_is_one_of_four():
    from rloo_demo.ui.controller import Controller

    assert [Controller.locale(v) for v in ("ka-GE", "ru", "RO_ro", "en-US")] == ["ka", "ru", "ro", "en"]
    for hostile in ("<script>alert(1)</script>", "de", "", None, 3, ["ka"], "../ka"):
        assert Controller.locale(hostile) == "en"
    assert t("<b>", "train.start") == "Start"


def _token_group(beta=0.1):
    pieces, before, after, ref = [" great", " film", " and"], [-2.0, -5.0, -1.0], [-1.5, -5.2, -0.9], [-2.5, -4.0, -1.1]
    c = {
        "text": "".join(pieces),
        "num_tokens": 3,
        "advantage": 0.5,
        "kl": sum(b - r for b, r in zip(before, ref, strict=True)),
        "kl_penalty": -0.05,
        "shaped_reward": 0.4,
        "token_texts": pieces,
        "token_logp": before,
        "token_logp_after": after,
        "token_ref_logp": ref,
        "token_entropy": [3.0, 0.2, 1.0],
    }
    others = [dict(c, shaped_reward=r, advantage=r) for r in (0.1, -0.3, 0.0)]
    return {"step": 7, "group": 0, "prompt": "This movie was", "beta": beta, "completions": [c, *others]}


def _probe_result():
    steps = [
        {"step": 0, "label": "base policy (step 0)", "samples": [{"text": "bad", "reward": -0.4}], "mean_reward": -0.4},
        {"step": 25, "label": "step 25", "samples": [{"text": "", "reward": 0.2}], "mean_reward": 0.2},
        {"step": 50, "label": "final (step 50)", "samples": [{"text": "good", "reward": 0.8}], "mean_reward": 0.8},
    ]
    return {"prompt": "This movie was", "seed": 3, "num_samples": 1, "snapshot_every": 25, "kept": 8, "steps": steps}


ENGLISH_PHRASES = (  # one from each sentence of these views
    *("Completion #", "coloured by", "reinforced", "What if", "The identity", "mean of the other", "Why it matters"),
    *("base policy", "mean reward", "Prompt:", "completions of the same prompt", "Warning", "collapsed"),
    *("The reward and the classifier", "no values", "per-token record", "Its advantage", "log-probability"),
    *("nats", "Entropy of the policy", "TRL subtracts", "spread over the run"),
    *("With an offset", "cancels in", "True gradient", "over the 8 states", "variance is", "points the same way"),
)
NUMBER = re.compile(r"[+−-]?\d+(?:\.\d+)?%?")


def _server_views(locale):
    """Every server-written text of the token view, the what-if table, the probe and the collapse warning."""
    from rloo_demo.eval.judges import collapse_warning
    from rloo_demo.ui import views

    g = _token_group()
    out = [views.token_spans_html(g, 0, m, locale) for m in views.MEASURES]
    out += [views.token_note_markdown(g, 0, m, locale) for m in views.MEASURES]
    out += [views.token_spans_html(_token_group(beta=0.0), 0, "k1", locale)]
    out += [views.token_note_markdown(_token_group(beta=0.0), 0, "k3", locale)]
    out += [views.token_spans_html({**g, "completions": [{"text": "x"}]}, 0, "delta", locale)]
    out += [views.whatif_markdown([g, {**g, "group": 1}], 1, locale)]
    out += [views.whatif_markdown([g, {**g, "group": 1}], 1, locale, offset=2.0)]
    from rloo_demo.toy import exact_table

    out += [views.toy_markdown(exact_table(0.0, 4, 1.0), locale)]
    out += [views.probe_html(_probe_result(), locale), views.probe_note(_probe_result(), locale)]
    out += [views.probe_html({"steps": []}, locale)]
    collapsed = {"distinct_2": 0.1, "repetition": 0.7, "base_perplexity": 900.0}
    out += [collapse_warning(collapsed, {"base_perplexity": 100.0}, locale)]
    out += [collapse_warning({"base_perplexity": 900.0}, {"base_perplexity": 100.0}, locale)]
    records = [{"step": s, "judges/distinct_2": 0.1, "judges/repetition": 0.7} for s in range(3)]
    out += [views.live_collapse_warning(records, locale)]
    judges = {"base": {"distinct_2": 0.8, "repetition": 0.1}, "trained": {"distinct_2": 0.1, "repetition": 0.7}}
    sampled = {"base": [{"reward": -0.2}], "trained": [{"reward": 0.9}], "trained_on": ["vader_compound"], "seed": 0}
    english = collapse_warning(judges["trained"], judges["base"])  # as the controller writes it into the result
    out += [views.compare_summary({**sampled, "judges": judges, "collapse_warning": english}, locale)]
    return out


@pytest.mark.parametrize("locale", OTHERS)
def test_token_whatif_probe_and_collapse_text_in_the_page_language(locale):
    """The text is the locale's, the numbers (and code) the same as in English, and no English sentence is left."""
    english, shown = _server_views("en"), _server_views(locale)
    for en, text in zip(english, shown, strict=True):
        assert text != en, en
        assert sorted(NUMBER.findall(text)) == sorted(NUMBER.findall(en)), (en, text)
    page = " ".join(shown)
    for phrase in ENGLISH_PHRASES:
        assert phrase not in page, (locale, phrase)


def test_english_server_text_is_the_engines_own():
    """en.json repeats the engine's English (the CLI prints it): the estimators' notes and the collapse warning."""
    from rloo_demo.advantages import ESTIMATOR_NOTES
    from rloo_demo.eval.judges import COLLAPSE_WARNING

    assert {name: t("en", f"estimator.{name}") for name in ESTIMATOR_NOTES} == ESTIMATOR_NOTES
    assert COLLAPSE_WARNING in t("en", "collapse.warning", reasons="x")


def test_gradio_frontend_still_exports_change_locale():
    """``ui.locale_switch`` switches the page's language through ``changeLocale``, an export of gradio's core
    bundle (what gradio's own Settings panel calls): an upgrade that renames it fails here, not in a browser."""
    from pathlib import Path

    import gradio

    bundles = list((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("core-*.js"))
    assert len(bundles) == 1, bundles
    assert re.search(r"\bas changeLocale\b", bundles[0].read_text(encoding="utf-8"))


def test_the_language_event_sends_every_tab_its_label_again(tmp_path):
    """Gradio translates a tab's label once, when it builds the page (the tab on screen apart): the selector's event
    and the page load send every tab its label again, which gradio then translates in the page's current locale."""
    from rloo_demo.public.limits import Limits
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(tmp_path / "runs"), limits=Limits.from_env()))
    try:
        demo = build_app(controller)
        tabs = {b._id for b in demo.blocks.values() if type(b).__name__ == "Tab"}
        for api_name in ("page_language", "page_load"):
            fn = next(f for f in demo.fns.values() if f.api_name == api_name)
            assert tabs <= {o._id for o in fn.outputs}, api_name
    finally:
        controller.close()


# ----------------------------------------------------------------------------- i18n exact


@pytest.fixture
def locales(tmp_path, monkeypatch):
    """English and Georgian of our own, with one key missing from Georgian and a hostile Georgian text."""
    files = {
        "en": {
            "a.hello": "Hello {name}",
            "a.only_en": "Only in English ({n})",
            "plot.reward": "reward",
            "plot.raw": "{name} (raw)",
            "plot.mean": "{label} mean {mean}",
            "plot.base": "base",
            "plot.group_title": "“{prompt}” (step {step})",
            "s.limit": "at most {limit} steps",
            "plot.with_brace": "x {y}",
        },
        "ka": {
            "a.hello": "გამარჯობა {name} {unknown} {{name}}",
            "plot.reward": "ჯილდო",
            "plot.raw": "{name} (ნედლი)",
            "plot.mean": "{label} საშუალო {mean}",
            "plot.base": "საბაზო",
            "plot.group_title": "«{prompt}» (ნაბიჯი {step})",
            "s.limit": "მაქს. {limit} ნაბიჯი",
        },
        "ro": {},
        "ru": {},
    }
    for code, data in files.items():
        (tmp_path / f"{code}.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(i18n, "FOLDER", tmp_path)
    i18n.load.cache_clear()
    i18n._plot_sources.cache_clear()
    yield files
    i18n.load.cache_clear()
    i18n._plot_sources.cache_clear()


def test_a_missing_key_falls_back_to_english_and_placeholders_fill_once(locales):
    assert i18n.t("ka", "a.only_en", n=3) == "Only in English (3)"
    # a placeholder the text does not get is left as written; a value is never read as a placeholder again
    assert i18n.t("ka", "a.hello", name="{unknown}") == "გამარჯობა {unknown} {unknown} {{unknown}}"
    assert i18n.t("en", "a.hello", name="<b>") == "Hello <b>"  # escaping is the view's job, not the lookup's
    with pytest.raises(KeyError):
        i18n.t("ka", "a.nowhere")


@pytest.mark.parametrize(
    "sent, code",
    [
        ("ka", "ka"),
        ("KA-ge", "ka"),
        (" ru_RU ", "ru"),
        ("ro-RO", "ro"),
        ("en-US", "en"),
        ("de", "en"),
        ("", "en"),
        (None, "en"),
        (["ka"], "en"),
        ("../ka", "en"),
        ("ka;q=0.9", "en"),
    ],
)
def test_a_locale_in_any_spelling_is_one_of_four(sent, code):
    assert i18n.normalize(sent) == code


def test_an_unknown_locale_file_is_never_opened():
    with pytest.raises(KeyError, match=r"unknown locale 'de'; known: en, ro, ka, ru"):
        i18n.load("de")


def test_static_texts_get_this_servers_settings_and_keep_other_braces(locales):
    out = i18n.translations(limit=40)
    assert out["en"]["s.limit"] == "at most 40 steps" and out["ka"]["s.limit"] == "მაქს. 40 ნაბიჯი"
    assert out["en"]["a.hello"] == "Hello {name}"  # not a server setting: left for the page's own filling
    assert set(out) == set(i18n.LOCALES) and out["ro"] == {}


def test_figure_text_is_translated_by_its_english_source_and_patterns(locales):
    assert i18n.plot_text("ka", "reward") == "ჯილდო"
    assert i18n.plot_text("ka", "reward (raw)") == "ჯილდო (ნედლი)"  # the pattern's value translated too
    assert i18n.plot_text("ka", "vader (raw)") == "vader (ნედლი)"  # a name is kept
    assert i18n.plot_text("ka", "base mean +0.250") == "საბაზო საშუალო +0.250"
    assert i18n.plot_text("ka", "“Great film” (step 7)") == "«Great film» (ნაბიჯი 7)"
    assert i18n.plot_text("ka", "x {y}") == "x {y}"  # a text with a placeholder is no fixed phrase
    assert i18n.plot_text("ka", "something else") == "something else" and i18n.plot_text("ka", 3) == 3
    assert i18n.plot_text("en", "reward (raw)") == "reward (raw)"


def test_every_text_holder_of_a_figure_is_translated(locales):
    fig = {
        "layout": {
            "title": {"text": "reward"},
            "xaxis": {"title": {"text": "reward"}},
            "yaxis2": {"title": {"text": "base mean 1"}},
            "annotations": [{"text": "reward"}, {"x": 1}],
            "legend": {"title": {"text": "reward"}},
        },
        "data": [{"name": "reward (raw)", "colorbar": {"title": {"text": "reward"}}}, {"y": [1]}],
    }
    out = i18n.localize_figure(json.loads(json.dumps(fig)), "ka-GE")
    assert out["layout"]["title"]["text"] == "ჯილდო" and out["layout"]["xaxis"]["title"]["text"] == "ჯილდო"
    assert out["layout"]["yaxis2"]["title"]["text"] == "საბაზო საშუალო 1"
    assert out["layout"]["annotations"] == [{"text": "ჯილდო"}, {"x": 1}]
    assert out["layout"]["legend"] == {"title": {"text": "reward"}}  # not a title this layer translates
    assert out["data"] == [{"name": "ჯილდო (ნედლი)", "colorbar": {"title": {"text": "ჯილდო"}}}, {"y": [1]}]
    assert i18n.localize_figure(fig, "en") is fig and fig["layout"]["title"]["text"] == "reward"


def test_a_figure_is_localized_in_every_place_a_text_sits_and_odd_shapes_are_left_alone(locales):
    fig = {
        "layout": {
            "title": {"text": "reward"},
            "xaxis": {"title": {"text": "reward (raw)"}},
            "yaxis2": {"title": "reward"},  # a plain string title: not a dict, left as it is
            "annotations": [{"text": "reward"}, {"x": 1}, "reward"],
        },
        "data": [
            {"name": "reward", "colorbar": {"title": {"text": "reward"}}},
            {"y": [1], "colorbar": {"title": "reward"}},
            None,
        ],
    }
    out = i18n.localize_figure(fig, "ka")
    assert out is fig
    assert fig["layout"]["title"] == {"text": "ჯილდო"} and fig["layout"]["xaxis"]["title"] == {"text": "ჯილდო (ნედლი)"}
    assert fig["layout"]["yaxis2"] == {"title": "reward"}
    assert fig["layout"]["annotations"] == [{"text": "ჯილდო"}, {"x": 1}, "reward"]
    assert fig["data"] == [
        {"name": "ჯილდო", "colorbar": {"title": {"text": "ჯილდო"}}},
        {"y": [1], "colorbar": {"title": "reward"}},
        None,
    ]
    assert i18n.localize_figure({}, "ka") == {}  # no layout, no data
    assert i18n.localize_figure({"layout": {"annotations": None}, "data": None}, "ka")["data"] is None
    english = {"layout": {"title": {"text": "reward"}}}
    assert i18n.localize_figure(english, "en") == {"layout": {"title": {"text": "reward"}}}
