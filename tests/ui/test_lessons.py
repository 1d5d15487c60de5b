"""The Lessons tab: the shipped results (assets/lessons/*.json) drawn from their own files, in the page's language,
on a page with no run at all. ``python -m pytest tests/ui/test_lessons.py``."""

import json
import re

import pytest
from apputil import app_for

from rloo_demo import i18n
from rloo_demo.ui.views import lessons as views

TRAJECTORY = next(lesson for lesson in views.LESSONS if lesson.id == "trajectory")


def cells(html: str) -> list[list[str]]:
    """The body's rows as their cells' texts (tags dropped)."""
    body = html.split("<tbody>", 1)[1]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


def headers(html: str) -> list[str]:
    return re.findall(r"<th>(.*?)</th>", html.split("<tbody>", 1)[0])


def test_the_table_is_the_files_own_rows_each_number_in_its_own_column(tmp_path):
    """Values chosen so that a swapped column, a lost sign, a dropped error or a rounding to fewer places shows;
    an estimator's name is text, never markup."""
    rows = [
        {"estimator": "<b>x</b>_y", "exact_reward": -0.12345, "sampled_reward": 0.5, "sampled_reward_error": 0.00049,
         "exact_kl": 2.5, "sampled_kl": 3.25, "sampled_kl_error": 1.0},
        {"estimator": "rloo", "exact_reward": 0.9, "sampled_reward": None, "exact_kl": 0.0001, "sampled_kl": 7,
         "sampled_kl_error": "n/a"},
    ]  # fmt: skip
    (tmp_path / TRAJECTORY.file).write_text(json.dumps({"rows": rows, "command": "python -m x"}))
    data = views.read(TRAJECTORY, tmp_path)
    html = views.table_html(TRAJECTORY, data, "en")
    assert cells(html) == [
        ["&lt;b&gt;x&lt;/b&gt;_y", "-0.1235", "0.5000 ± 0.0005", "2.5000", "3.2500 ± 1.0000"],
        ["rloo", "0.9000", "–", "0.0001", "7.0000"],
    ]
    assert "<b>" not in html
    assert headers(html) == [
        i18n.t("en", key) for key in ["lessons.col.estimator", *(c.header for c in TRAJECTORY.columns)]
    ]
    ka = views.table_html(TRAJECTORY, data, "ka")
    assert headers(ka)[1] == i18n.t("ka", "lessons.col.exact_reward") != headers(html)[1]


def test_the_shipped_trajectory_table_shows_its_files_numbers():
    data = views.read(TRAJECTORY)
    assert data is not None, "assets/lessons/trajectory.json is shipped"
    shown = cells(views.table_html(TRAJECTORY, data, "ru"))
    expected = [
        [
            r["estimator"],
            f"{r['exact_reward']:.4f}",
            f"{r['sampled_reward']:.4f} ± {r['sampled_reward_error']:.4f}",
            f"{r['exact_kl']:.4f}",
            f"{r['sampled_kl']:.4f} ± {r['sampled_kl_error']:.4f}",
        ]
        for r in data["rows"]
    ]
    assert [[c.replace("_", "") for c in row] for row in shown] == [
        [c.replace("_", "") for c in row] for row in expected
    ]
    assert len(shown) == 4


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"])
def test_a_missing_or_broken_file_is_said_by_name_in_the_pages_language(tmp_path, content):
    if content is not None:
        (tmp_path / TRAJECTORY.file).write_text(content)
    assert views.read(TRAJECTORY, tmp_path) is None
    said = views.texts(TRAJECTORY, None, "ro")
    assert i18n.t("ro", "lessons.missing", file="trajectory.json") in said
    assert said.startswith(f"### {i18n.t('ro', 'lessons.trajectory.title')}")


def test_the_figure_is_translated_on_a_copy_and_the_shipped_one_stays_english():
    data = views.read(TRAJECTORY)
    before = json.dumps(data["figure"])
    ru = views.figure(data, "ru")
    names = {trace.get("name") for trace in ru["data"]}
    assert i18n.t("ru", "plot.exact_path") in names and i18n.t("ru", "plot.sampled_seeds") in names
    assert i18n.t("ru", "plot.sampled_mean", n="20") in names
    assert ru["layout"]["title"]["text"] == i18n.t("ru", "plot.trajectory_title", k="4", beta="0.1", lr="2")
    assert json.dumps(data["figure"]) == before  # the shipped figure is not translated in place
    assert views.figure(data, "en")["layout"]["title"]["text"].startswith("Exact expected-update path")


@pytest.fixture(scope="module")
def empty_page(tmp_path_factory):
    controller, demo, handler, component = app_for(tmp_path_factory.mktemp("no-runs"))
    yield handler, component
    controller.close()


@pytest.mark.parametrize("locale", i18n.LOCALES)
def test_a_page_with_no_run_loads_the_lessons_in_its_language(empty_page, locale):
    """With an empty runs folder, the page's load draws every lesson: its title and note in the page's language, the
    command from its file, the day it was measured, its table and its figure. The language switch draws them again."""
    handler, component = empty_page
    data = views.read(TRAJECTORY)
    for out in (handler["page_load"](None, "cid", locale), handler["page_language"](locale, None, 0.6)):
        text = out[component["lesson-trajectory-text"]]
        assert i18n.t(locale, "lessons.trajectory.title") in text and i18n.t(locale, "lessons.trajectory.note") in text
        assert data["command"] in text and i18n.t(locale, "lessons.measured", date=TRAJECTORY.measured) in text
        assert out[component["lesson-trajectory-table"]].count("<tr>") == 1 + len(data["rows"])
        figure = json.loads(out[component["lesson-trajectory-plot"]].plot)
        assert len(figure["data"]) == len(data["figure"]["data"])
        assert figure["data"][0]["y"] == data["figure"]["data"][0]["y"]


def test_a_lesson_is_drawn_once_per_language_and_again_when_its_file_changes(tmp_path, monkeypatch):
    from rloo_demo.ui.tabs import lessons as tab

    monkeypatch.setattr(views, "LESSONS_DIR", tmp_path)
    path = tmp_path / TRAJECTORY.file
    path.write_text(json.dumps({"rows": [{"estimator": "rloo", "exact_reward": 0.25}], "command": "first"}))
    first = tab._drawn_one(TRAJECTORY, "ka")
    assert tab._drawn_one(TRAJECTORY, "ka") is first  # the same drawing, not drawn again
    assert tab._drawn_one(TRAJECTORY, "ro") is not first
    path.write_text(json.dumps({"rows": [{"estimator": "rloo", "exact_reward": 0.125}], "command": "second one"}))
    text, _, table = tab._drawn_one(TRAJECTORY, "ka")
    assert "second one" in text and "0.1250" in table and "0.2500" not in table
    path.unlink()
    assert i18n.t("ka", "lessons.missing", file=TRAJECTORY.file) in tab._drawn_one(TRAJECTORY, "ka")[0]
