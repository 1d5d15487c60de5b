"""The Train tab's plots, one row each in ``TRAIN_PLOTS``: the tab builds each plot with its label and its "What am I
looking at?" note from its row, a page tick updates the plots in the table's order, and ``figures`` draws them with
the row's builder. A new plot is one row here plus its translations (docs/development.md, "Add a Train plot").

The builders are the pure ones of ``rloo_demo.ui.plots`` (records in, a figure dict out); this module is where the
page meets them: the text keys, the element ids, the layout and the gradio payload.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr

from rloo_demo import i18n
from rloo_demo.server.cache import SharedBuilds
from rloo_demo.server.readers import RunView
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, as_plot
from rloo_demo.ui.plots.thin import thinned
from rloo_demo.ui.plots.train import mark_steps
from rloo_demo.ui.views.train import run_alerts


@dataclass(frozen=True)
class TrainPlot:
    """One plot of the Train tab."""

    name: str  # the tab's attribute (``ui.<name>``)
    label: str  # text key of its label
    note: str  # text key of its note: what it shows, what healthy looks like, what not
    elem_id: str
    figure: Callable[..., dict]  # (records, smoothing) -> figure dict; (records) where not ``smoothed``
    row: str | None = None  # plots of one row stand side by side (consecutive rows of the table)
    fold: str | None = None  # ... or inside a fold of the column (``PLOT_FOLDS``)
    smoothed: bool = True  # whether the smoothing slider applies (the meter's sparse points are not smoothed)
    marked: bool = False  # the run's warnings are marked on it at their steps (the curves a learner watches)


TRAIN_PLOTS = (
    TrainPlot("reward_plot", "train.plot_reward", "train.note_reward", "reward-plot", plots.reward_figure, marked=True),
    TrainPlot("kl_plot", "train.plot_kl", "train.note_kl", "kl-plot", plots.kl_figure, marked=True),
    # the gradient's norm, not the loss: RLOO's surrogate loss is 0 by construction (plots.LOSS_NOTE)
    TrainPlot("grad_plot", "train.plot_grad", "train.note_grad", "grad-norm-plot", plots.grad_norm_figure, "update"),
    TrainPlot(
        "entropy_plot", "train.plot_entropy", "train.note_entropy", "entropy-plot", plots.entropy_figure, "update"
    ),
    TrainPlot("length_plot", "train.plot_length", "train.note_length", "length-plot", plots.length_figure, "signal"),
    TrainPlot(
        "zero_std_plot", "train.plot_zero", "train.note_zero", "zero-signal-plot", plots.zero_signal_figure, "signal"
    ),
    TrainPlot(
        "kl_estimators_plot",
        "train.plot_kl_estimators",
        "train.note_kl_estimators",
        "kl-estimators-plot",
        plots.kl_estimators_figure,
        "text",
    ),
    TrainPlot("judges_plot", "train.plot_judges", "train.note_judges", "judges-plot", plots.judges_figure, "text"),
    TrainPlot(
        "variance_plot",
        "train.plot_variance",
        "train.note_variance",
        "variance-plot",
        plots.variance_figure,
        fold="meter",
        smoothed=False,
    ),
    TrainPlot(
        "cosine_plot",
        "train.plot_cosine",
        "train.note_cosine",
        "cosine-plot",
        plots.cosine_figure,
        fold="meter",
        smoothed=False,
    ),
)
PLOT_FOLDS = {"meter": ("train.meter_accordion", "train.meter_help")}  # a fold's title and the help under it


def build_plots(ui: SimpleNamespace) -> None:
    """The plots of the tab's column, row by row, as ``ui.<name>``; ``ui.plots`` lists them in the table's order
    (what a tick and ``figures`` give, one for one). No value here: on load, a page with no run gets titled empty
    axes in its language (app.on_load)."""
    for (row, fold), group in itertools.groupby(TRAIN_PLOTS, key=lambda p: (p.row, p.fold)):
        with _place(row, fold):
            for plot in group:
                with gr.Column(min_width=300):
                    setattr(ui, plot.name, gr.Plot(label=L(plot.label), show_label=False, elem_id=plot.elem_id))
                    with gr.Accordion(L("common.what"), open=False, elem_classes=["rloo-plot-note"]):
                        gr.Markdown(L(plot.note), elem_classes=["rloo-small"], elem_id=f"{plot.elem_id}-note")
    ui.plots = [getattr(ui, p.name) for p in TRAIN_PLOTS]


@contextlib.contextmanager
def _place(row: str | None, fold: str | None):
    if fold is not None:
        title, help_key = PLOT_FOLDS[fold]
        with gr.Accordion(L(title), open=False):
            gr.Markdown(L(help_key), elem_classes=["rloo-small"])
            yield
    elif row is not None:
        with gr.Row(equal_height=False):
            yield
    else:
        yield


def figures(records: Sequence[dict], smoothing, locale: str = "en", started: bool | None = None) -> list:
    """The tab's plots in ``locale``, in ``TRAIN_PLOTS``' order; with ``started`` False (None: no records) each says
    no run has started."""
    smoothing = smoothing if isinstance(smoothing, int | float) and not isinstance(smoothing, bool) else 0.6
    figs = [p.figure(records, smoothing) if p.smoothed else p.figure(records) for p in TRAIN_PLOTS]
    if not (bool(records) if started is None else started):
        figs = [plots.no_run(f) for f in figs]
    figs = [i18n.localize_figure(f, locale) for f in figs]
    # where a warning fired, on the plots that mark them
    marks = [(a["step"], i18n.t(locale, f"alert.{a['kind']}_title")) for a in run_alerts(records, locale)]
    if marks:
        for plot, fig in zip(TRAIN_PLOTS, figs, strict=True):
            if plot.marked:
                mark_steps(fig, marks)
    return [as_plot(thinned(f)) for f in figs]  # a long run's traces cut to plots.thin.MAX_POINTS points


def shared_figures(builds: SharedBuilds, view: RunView, smoothing, locale: str = "en") -> list | None:
    """``figures`` of a run's records, shared by every page that shows the same step with the same settings
    (``builds``: the controller's); ``None`` when they are not built yet and this step's builds are spent: ask
    again at the next."""
    number = isinstance(smoothing, int | float) and not isinstance(smoothing, bool) and math.isfinite(smoothing)
    # to the slider's own values (0 to 0.95 by 0.05): a client sending any other number cannot force a new build
    smoothing = round(min(max(smoothing, 0.0), 0.95) * 20) / 20 if number else None  # None: figures' default
    locale = i18n.normalize(locale)  # likewise one of the four languages, whatever the client sends
    last = view.records[-1] if view.records else {}
    # keyed by the run, its last record and the page's smoothing and language; the allowance counts by the step
    key = (view.name, len(view.records), last.get("step"), last.get("logged_at"), smoothing, locale)
    build = lambda: figures(view.records, smoothing, locale, started=True)  # noqa: E731
    return builds.figures(key, key[:4], build, always=smoothing in (None, 0.6))  # the slider's default: always
