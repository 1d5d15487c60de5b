"""The Train tab's figures, shared builds and texts on records the test writes: every figure gets the page's
smoothing (records that log every plotted metric, so an unsmoothed figure differs), a cache entry is a run's
step *and* its time (the same number of records with another last step is a new build), and the status line says
the phase and why a run stopped in the page's language."""

from __future__ import annotations

import json
import math

import pytest
from test_ui_handlers import _tab, _Ticks

from rloo_demo import i18n
from rloo_demo.server.cache import LRU
from rloo_demo.server.readers import RunView
from rloo_demo.ui import plots, train_tab
from rloo_demo.ui.views import status_line
from rloo_demo.ui.views.train import phase_line


def records(n, shift=0.0, start=1):
    """Steps with every metric the Train tab plots, wavy so that smoothing changes each curve."""
    out = []
    for i in range(n):
        step, w = start + i, math.sin(i * 1.7 + shift)
        out.append({
            "step": step, "logged_at": 1000.0 + step, "reward": 0.1 * i + w, "reward_std": 0.2 + 0.1 * abs(w),
            "kl": 0.01 * i + 0.005 * w, "grad_norm": 1.0 + w, "entropy": 2.0 - 0.3 * w,
            "completions/mean_length": 20 + 5 * w, "frac_reward_zero_std": 0.5 + 0.4 * w / 2,
            "frac_raw_score_zero_std": 0.4 + 0.3 * w / 2, "kl_k1": 0.02 + 0.01 * w, "kl_k2": 0.01 + 0.004 * w,
            "kl_k3": 0.015 + 0.005 * abs(w),
        })
    return out


def _data(figure):
    return json.loads(json.dumps(i18n.localize_figure(figure, "ka")))["data"]


def test_every_smoothed_figure_of_the_train_tab_gets_the_pages_smoothing():
    recs = records(12)
    drawn = [json.loads(p.plot) for p in train_tab.figures(recs, 0.3, "ka")]
    secondary = plots.secondary_figures(recs, 0.3)
    expected = {
        2: secondary["grad_norm"], 3: secondary["entropy"], 4: secondary["completion_length"],
        5: secondary["frac_reward_zero_std"], 6: plots.kl_estimators_figure(recs, 0.3),
    }
    unsmoothed = plots.secondary_figures(recs, 0.0)
    for index, figure in expected.items():
        assert drawn[index]["data"] == _data(figure), index
    assert _data(unsmoothed["grad_norm"]) != _data(secondary["grad_norm"])  # the records tell smoothings apart
    assert _data(plots.kl_estimators_figure(recs, 0.0)) != _data(plots.kl_estimators_figure(recs, 0.3))
    assert _data(plots.secondary_figures(recs)["entropy"]) != drawn[3]["data"]  # the builder's default is not 0.3


def _view(name, recs, status="running", reason=None):
    return RunView(name, status, None, recs, 30, 12.0, None, status == "running", reason=reason)


def test_the_same_number_of_records_with_another_last_step_or_time_is_a_new_build(monkeypatch):
    from rloo_demo.server.cache import BuildAllowance

    monkeypatch.setattr(train_tab, "_FIGURES", LRU(96))
    monkeypatch.setattr(train_tab, "_BUILDS", BuildAllowance(builds=3, window=10.0))
    first = train_tab.shared_figures(_view("same", records(5)), 0.6, "ka")
    moved = records(5, start=2)  # five records ending at step 6, logged at the same time as step 6 would be
    moved[-1]["logged_at"] = records(5)[-1]["logged_at"]
    assert train_tab.shared_figures(_view("same", moved), 0.6, "ka") is not first
    relogged = records(5)
    relogged[-1]["logged_at"] += 50.0  # the same step logged again (a run of the same name, restarted)
    assert train_tab.shared_figures(_view("same", relogged), 0.6, "ka") is not first
    assert train_tab.shared_figures(_view("same", records(5)), 0.6, "ka") is first
    assert train_tab.shared_figures(_view("empty", []), 0.6, "ka") is not None  # no records yet: still drawn


def test_the_warnings_are_built_again_when_the_last_record_changes_not_only_the_count(monkeypatch):
    monkeypatch.setattr(train_tab, "_TEXTS", LRU(256))
    ticks = _Ticks()
    tab = _tab(ticks)
    base = records(6)
    train_tab._alerts_and_summary(tab, _view("texts", base), "ka")
    calls = len(ticks.calls)
    assert train_tab._alerts_and_summary(tab, _view("texts", records(6)), "ka") and len(ticks.calls) == calls
    for change in ({"step": 60}, {"logged_at": 5.0}):
        changed = records(6)
        changed[-1] = changed[-1] | change  # the records before the last one are the same
        train_tab._alerts_and_summary(tab, _view("texts", changed), "ka")
        assert len(ticks.calls) == calls + 1, change
        calls += 1
    train_tab._alerts_and_summary(tab, _view("none", []), "ka")  # a run with no records: built, not an error


@pytest.mark.parametrize("locale", ["ka", "ru"])
def test_the_status_line_gives_the_phase_and_a_stopped_runs_reason_in_the_pages_language(locale):
    loading = train_tab.render(_tab(_Ticks(phase="loading")), _view("p", []), 0.6, 0, locale)
    assert loading["status"] == phase_line("loading", 12.0, 30, locale) != phase_line("loading", 12.0, 30, "en")
    reason = "its page was gone for more than 60 s (abandoned)"
    stopped = train_tab.render(_tab(_Ticks()), _view("s", records(3), "stopped", reason), 0.6, 3, locale)
    assert stopped["status"] == status_line("stopped", records(3), 30, 12.0, "s", reason, locale)
    assert stopped["status"] != status_line("stopped", records(3), 30, 12.0, "s", None, locale)


def test_a_run_that_said_finished_before_it_left_the_runner_gets_its_summary_once_it_has(monkeypatch):
    """A run's status is "finished" a moment before its thread ends: a tick then sees it finished and still live,
    and the controller has no summary for a live run yet. The next tick, the run ended, with the same records and
    status, must build the texts again and show the summary (the browser test that waited for it failed once)."""
    from rloo_demo.store.summary import summarize
    from rloo_demo.ui.views.train import summary_markdown

    monkeypatch.setattr(train_tab, "_TEXTS", LRU(256))
    recs = records(6)
    summary = summarize(recs)

    class Ending(_Ticks):
        def run_summary(self, name, locale):
            self.calls.append(("run_summary", name, locale))
            return None if self.live else (summary, [])

    ticks = Ending()
    ticks.live = True
    finishing = RunView("ending", "finished", None, recs, 6, 3.0, None, True)
    assert train_tab._alerts_and_summary(_tab(ticks), finishing, "ka")[1] == ""
    ticks.live = False
    ended = RunView("ending", "finished", None, recs, 6, 3.0, None, False)
    assert train_tab._alerts_and_summary(_tab(ticks), ended, "ka")[1] == summary_markdown(summary, [], "ka") != ""
    assert len(ticks.calls) == 2
