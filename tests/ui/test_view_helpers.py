"""The views' small shared helpers (ui/views/common.py), each against values written out here: the sign classes at
and around their tolerance, the escaping of every character HTML treats specially, the judges' number format and
the prompt-cut note. ``python -m pytest tests/ui/test_view_helpers.py``."""

import pytest

from rloo_demo.i18n import t
from rloo_demo.ui.views.common import NEG, POS, ZERO, _duration, _f4, _fmt, _judge, _sign_class, prompt_cut_note, text


@pytest.mark.parametrize(
    ("value", "want"),
    [(0.5, POS), (1.5e-6, POS), (1e-6, ZERO), (0.0, ZERO), (-1e-6, ZERO), (-1.5e-6, NEG), (-0.5, NEG)],
)
def test_a_sign_class_counts_values_within_a_millionth_as_zero(value, want):
    assert _sign_class(value) == want


def test_a_sign_class_takes_its_own_tolerance():
    assert [_sign_class(v, tol=0.1) for v in (0.2, 0.1, -0.1, -0.2)] == [POS, ZERO, ZERO, NEG]


def test_text_escapes_every_character_html_reads_and_quotes_too():
    written = "&lt;a href=&quot;x&quot; title=&#x27;y&#x27;&gt;&amp;amp;&lt;/a&gt;"
    assert text("<a href=\"x\" title='y'>&amp;</a>") == written
    assert text(3.5) == "3.5" and text(None) == "None"


def test_numbers_print_with_their_sign_and_durations_as_minutes_and_seconds():
    assert (_fmt(0.1234), _fmt(-2.0), _fmt(0.0)) == ("+0.123", "-2.000", "+0.000")
    assert (_f4(0.12345), _f4(-1.0), _f4(None)) == ("+0.1235", "-1.0000", "–")
    assert [_duration(s) for s in (None, 0, 59.4, 59.6, 61, 3599)] == ["–", "0:00", "0:59", "1:00", "1:01", "59:59"]
    # from an hour on, hours and minutes ("225:17" read as a clock time)
    assert [_duration(s) for s in (3725, 13517)] == ["1 h 2 min", "3 h 45 min"]


def test_a_judge_value_is_formatted_only_when_it_is_a_number():
    assert _judge(0.25, ".1%") == "25.0%" and _judge(3, "d") == "3"
    # a boolean is a Python int, and "True" read as 100% would be a lie; text and None are no number either
    assert [_judge(v, ".2f") for v in (True, False, None, "0.5", [0.5])] == ["–"] * 5


def test_the_prompt_cut_note_gives_the_three_numbers_in_the_pages_language():
    result = {"prompt_cut": {"tokens": 1500, "context": 1024, "dropped": 480}}
    en = prompt_cut_note(result)
    assert en == "✂️ " + t("en", "prompt.cut", tokens="1,500", context="1,024", dropped="480")
    assert "1,500" in en and "1,024" in en and "480" in en
    ru = prompt_cut_note(result, "ru")
    assert ru == "✂️ " + t("ru", "prompt.cut", tokens="1,500", context="1,024", dropped="480") and ru != en
    # a number that is not an int reads "?", never a made-up figure
    odd = prompt_cut_note({"prompt_cut": {"tokens": 1500, "context": None, "dropped": "x"}})
    assert odd == "✂️ " + t("en", "prompt.cut", tokens="1,500", context="?", dropped="?")


@pytest.mark.parametrize("result", [{}, {"prompt_cut": None}, {"prompt_cut": [1, 2]}, None, "cut", []])
def test_no_prompt_cut_note_for_a_prompt_that_fit_or_an_answer_that_is_no_dict(result):
    assert prompt_cut_note(result) == ""
