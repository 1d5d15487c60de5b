"""The translation layer (i18n.py) on locale files written here, where the wrong versions differ: a key the
locale lacks (English comes instead), a hostile translation (braces, a placeholder of its own, markup), values that
look like placeholders, a locale sent in any spelling, and a figure whose every text holder is translated."""

import json

import pytest

from rloo_demo import i18n


@pytest.fixture
def locales(tmp_path, monkeypatch):
    """English and Georgian of our own, with one key missing from Georgian and a hostile Georgian text."""
    files = {
        "en": {"a.hello": "Hello {name}", "a.only_en": "Only in English ({n})", "plot.reward": "reward",
               "plot.raw": "{name} (raw)", "plot.mean": "{label} mean {mean}", "plot.base": "base",
               "plot.group_title": "“{prompt}” (step {step})", "s.limit": "at most {limit} steps",
               "plot.with_brace": "x {y}"},
        "ka": {"a.hello": "გამარჯობა {name} {unknown} {{name}}", "plot.reward": "ჯილდო", "plot.raw": "{name} (ნედლი)",
               "plot.mean": "{label} საშუალო {mean}", "plot.base": "საბაზო",
               "plot.group_title": "«{prompt}» (ნაბიჯი {step})",
               "s.limit": "მაქს. {limit} ნაბიჯი"},
        "ro": {}, "ru": {},
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
    [("ka", "ka"), ("KA-ge", "ka"), (" ru_RU ", "ru"), ("ro-RO", "ro"), ("en-US", "en"), ("de", "en"), ("", "en"),
     (None, "en"), (["ka"], "en"), ("../ka", "en"), ("ka;q=0.9", "en")],
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
        "layout": {"title": {"text": "reward"}, "xaxis": {"title": {"text": "reward"}},
                   "yaxis2": {"title": {"text": "base mean 1"}}, "annotations": [{"text": "reward"}, {"x": 1}],
                   "legend": {"title": {"text": "reward"}}},
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
        {"name": "ჯილდო", "colorbar": {"title": {"text": "ჯილდო"}}}, {"y": [1], "colorbar": {"title": "reward"}}, None
    ]
    assert i18n.localize_figure({}, "ka") == {}  # no layout, no data
    assert i18n.localize_figure({"layout": {"annotations": None}, "data": None}, "ka")["data"] is None
    english = {"layout": {"title": {"text": "reward"}}}
    assert i18n.localize_figure(english, "en") == {"layout": {"title": {"text": "reward"}}}
