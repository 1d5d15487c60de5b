"""What the Train tab's figures may cost, whoever asks. ``python -m pytest tests/ui/test_figure_budget.py``."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from rloo_demo.server.cache import BuildAllowance, SharedBuilds
from rloo_demo.server.readers import RunView
from rloo_demo.ui.plots.thin import MAX_POINTS, thinned
from rloo_demo.ui.tabs import train as train_tab
from rloo_demo.ui.tabs import train_plots


def test_a_long_trace_keeps_every_kth_point_and_the_last():
    x = list(range(1, 1001))
    fig = {
        "data": [
            {"x": x, "y": [v * 0.5 for v in x], "text": [str(v) for v in x], "name": "long"},
            {"x": [1, 2, 3], "y": [4, 5, 6], "name": "short"},
        ],
        "layout": {"title": "t"},
    }
    out = thinned(fig, max_points=400)
    stride = 3  # ceil(1000 / 400)
    want = list(range(1, 1001, stride))
    want[-1] = 1000  # the newest point replaces the last stride's
    assert out["data"][0]["x"] == want and len(want) <= 400
    assert out["data"][0]["y"] == [v * 0.5 for v in want] and out["data"][0]["text"] == [str(v) for v in want]
    assert out["data"][1] is fig["data"][1]  # a short trace is untouched
    assert len(fig["data"][0]["x"]) == 1000  # the cached figure is not changed
    assert thinned({"data": [fig["data"][1]]}) == {"data": [fig["data"][1]]}


def _view(steps: int, name: str = "long-run") -> RunView:
    records = [
        {"step": s, "reward": (s % 7) * 0.1, "kl": 0.001 * s, "logged_at": 1000.0 + s} for s in range(1, steps + 1)
    ]
    return RunView(name, "running", None, records, steps + 10, 1.0, None, True)


def test_a_5000_step_runs_figures_have_bounded_traces_ending_at_its_last_step():
    import json

    plots = train_tab.figures(_view(5000).records, 0.6, "en")
    traces = [t for p in plots for t in json.loads(p.plot)["data"] if isinstance(t.get("x"), list) and t["x"]]
    assert traces  # the checks below see something
    assert max(len(t["x"]) for t in traces) <= MAX_POINTS
    rewards = [t for t in traces if t.get("name") == "total reward"]
    assert rewards and rewards[0]["x"][-1] == 5000


def test_the_allowance_counts_builds_per_thing_and_refills_after_its_window():
    allowance = BuildAllowance(builds=3, window=10.0)
    assert [allowance.take("a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert allowance.take("b", 1.0)  # another step has its own
    assert not allowance.take("a", 9.9) and allowance.take("a", 10.0)
    assert [allowance.take("a", 10.5) for _ in range(3)] == [True, True, False]  # a full new window: 3 builds again


def test_the_allowance_remembers_256_things_by_default():
    allowance = BuildAllowance(builds=1, window=10.0)
    assert all(allowance.take(i, 0.0) for i in range(257))  # the 257th pushes the first out
    assert not allowance.take(1, 1.0) and allowance.take(0, 1.0)  # 1 is remembered; 0 was forgotten: starts anew


@pytest.fixture
def builds(monkeypatch):
    """The figures actually built, as (smoothing, locale)."""
    made = []
    real = train_plots.figures
    monkeypatch.setattr(
        train_plots, "figures", lambda records, s, loc, **k: made.append((s, loc)) or real(records, s, loc, **k)
    )
    return made


def test_a_client_cycling_the_smoothing_gets_three_builds_a_step_and_the_default_always(builds):
    view, shared = _view(40), SharedBuilds()
    got = [train_plots.shared_figures(shared, view, i * 0.05, "en") for i in range(1, 20) if i != 12]  # 12 x 0.05 = 0.6
    assert builds == [(0.05, "en"), (0.1, "en"), (0.15, "en")]
    assert all(g is not None for g in got[:3]) and all(g is None for g in got[3:])
    assert train_plots.shared_figures(shared, view, 0.1, "en") is got[1]  # what was built is served to anyone
    for locale in ("en", "ru", "ka", "ro"):  # the slider's default is never refused
        assert train_plots.shared_figures(shared, view, 0.6, locale) is not None
    assert len(builds) == 3 + 4
    later = _view(41)  # the next step: a fresh allowance
    assert train_plots.shared_figures(shared, later, 0.3, "en") is not None and builds[-1] == (0.3, "en")
    # another server's builds are its own: nothing built, nothing spent
    assert train_plots.shared_figures(SharedBuilds(), view, 0.5, "en") is not None and builds[-1] == (0.5, "en")


class _Page:
    """The controller's reads a tick makes (no phase, no summary), and the server's shared builds."""

    def __init__(self):
        self.builds = SharedBuilds()

    def run_phase(self, name):
        return None

    def run_summary(self, name, locale):
        return None


def _tab(controller) -> SimpleNamespace:
    names = ("status", "run_error", "alerts", "summary", "alert_step", "alert_open", "start", "drawn")
    return SimpleNamespace(**{n: n for n in names}, plots=[f"p{i}" for i in range(10)], controller=controller)


def test_a_tick_refused_its_figures_keeps_its_drawn_step_and_asks_again(builds):
    ui = _tab(_Page())
    view = _view(40)
    for s in (0.05, 0.1, 0.15):
        train_plots.shared_figures(ui.controller.builds, view, s, "en")
    refused = train_tab.render(ui, view, 0.2, -1, "en")
    assert "drawn" not in refused and not any(p in refused for p in ui.plots)  # drawn stays -1: the next tick asks
    served = train_tab.render(ui, view, 0.6, -1, "en")
    assert served["drawn"] == 40 and all(p in served for p in ui.plots)


def test_the_lru_forgets_the_least_recently_used_and_a_miss_is_none():
    from rloo_demo.server.cache import LRU, stamp

    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get_fresh("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert list(cache) == ["a", "c"] and cache.get_fresh("b") is None
    cache.put("a", 4)
    assert list(cache.items()) == [("c", 3), ("a", 4)]
    allowance = BuildAllowance(builds=1, window=5.0, size=1)  # its table bounded too: a forgotten thing starts anew
    assert allowance.take("x", 0.0) and not allowance.take("x", 1.0)
    assert allowance.take("y", 1.0) and allowance.take("x", 2.0)
    assert stamp(Path("/nonexistent/file")) == (0, 0, 0)


def test_thinning_keeps_customdata_with_its_points_and_counts_only_lists_of_x():
    """``customdata`` thins with ``x`` (a hover that reads it would otherwise name another point); a trace whose
    ``x`` is missing or not a list, or that is not a dict at all, counts as no points; a figure with nothing to thin
    comes back as the very object (a cache's entry is not copied for nothing)."""
    x = list(range(10))
    trace = {"x": x, "y": x, "customdata": [[v, -v] for v in x], "text": "one label for all", "name": "c"}
    out = thinned({"data": [trace]}, max_points=4)["data"][0]
    keep = [0, 3, 6, 9]  # stride ceil(10 / 4) = 3 ends on the last point by itself
    assert out["x"] == keep and out["customdata"] == [[v, -v] for v in keep]
    assert out["text"] == "one label for all"  # not a list of the trace's length: left whole
    exact = {"data": [trace]}
    assert thinned(exact, max_points=10) is exact  # exactly max_points: nothing to thin
    longer = {"data": [trace, {"x": list(range(20)), "y": list(range(20))}]}
    assert thinned(longer, max_points=10)["data"][0] is trace  # beside a longer one, still kept whole
    odd = {"data": [{"y": list(range(50))}, {"x": "abc"}, "not a trace"]}
    assert thinned(odd, max_points=0) is odd


def test_thinning_to_one_point_keeps_the_newest():
    x = list(range(7))
    out = thinned({"data": [{"x": x, "y": [v * v for v in x]}]}, max_points=1)["data"][0]
    assert out == {"x": [6], "y": [36]}
    out = thinned({"data": [{"x": x, "y": x}]}, max_points=2)["data"][0]
    assert out == {"x": [0, 6], "y": [0, 6]}  # stride 4 keeps 0 and 4; the newest replaces 4
