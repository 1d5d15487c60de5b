"""Pure functions that turn engine data (metric records, rollout groups, run summaries) into what the page shows: HTML
tables, Markdown, status lines and CLI commands, one module per tab. No gradio import, so they are tested without a
server.
"""

from __future__ import annotations

from rloo_demo.ui.views.common import (
    _DOWN,
    _LESS,
    _MORE,
    _UP,
    NEG,
    POS,
    ZERO,
    _duration,
    _f4,
    _fmt,
    _judge,
    _sign_class,
    text,
)
from rloo_demo.ui.views.compare import compare_summary, compare_table, judges_line
from rloo_demo.ui.views.probe import _PROBE_LABELS, probe_html, probe_label, probe_note
from rloo_demo.ui.views.rollouts import (
    WHATIF_COLUMNS,
    arithmetic_markdown,
    group_label,
    group_rows,
    groups_html,
    kl_estimators_markdown,
    kl_heatmap_note,
    whatif_markdown,
)
from rloo_demo.ui.views.runs import RUN_COLUMNS, RUN_HEADERS, run_headers, run_rows
from rloo_demo.ui.views.tokens import (
    _ENTROPY,
    MEASURES,
    _extreme,
    _scale,
    _token_text,
    _visible,
    token_colour,
    token_note_markdown,
    token_rows,
    token_spans_html,
)
from rloo_demo.ui.views.toy import toy_markdown
from rloo_demo.ui.views.train import (
    LIVE_JUDGE_STEPS,
    LOAD_SECONDS,
    cli_command,
    estimate_text,
    live_collapse_warning,
    meter_estimate_text,
    prechecks_markdown,
    status_line,
    status_word,
)

__all__ = [
    "LIVE_JUDGE_STEPS",
    "LOAD_SECONDS",
    "MEASURES",
    "NEG",
    "POS",
    "RUN_COLUMNS",
    "RUN_HEADERS",
    "WHATIF_COLUMNS",
    "ZERO",
    "_DOWN",
    "_ENTROPY",
    "_LESS",
    "_MORE",
    "_PROBE_LABELS",
    "_UP",
    "_duration",
    "_extreme",
    "_f4",
    "_fmt",
    "_judge",
    "_scale",
    "_sign_class",
    "_token_text",
    "_visible",
    "arithmetic_markdown",
    "cli_command",
    "compare_summary",
    "compare_table",
    "estimate_text",
    "group_label",
    "group_rows",
    "groups_html",
    "judges_line",
    "kl_estimators_markdown",
    "kl_heatmap_note",
    "live_collapse_warning",
    "meter_estimate_text",
    "prechecks_markdown",
    "probe_html",
    "probe_label",
    "probe_note",
    "run_headers",
    "run_rows",
    "status_line",
    "status_word",
    "text",
    "token_colour",
    "token_note_markdown",
    "token_rows",
    "token_spans_html",
    "toy_markdown",
    "whatif_markdown",
]
