"""The history probe: one prompt's completions from the base policy, each snapshot and the latest policy."""

from __future__ import annotations

import re

from rloo_demo.i18n import t
from rloo_demo.ui.views.common import _sign_class, prompt_cut_note, text
from rloo_demo.ui.views.tokens import _token_text

# The probe's policy labels, as the controller writes them (English): (pattern, key), the step number kept.
_PROBE_LABELS = (
    (re.compile(r"^base policy \(step (?P<step>\d+)\)$"), "probe.label_base"),
    (re.compile(r"^step (?P<step>\d+)$"), "probe.label_step"),
    (re.compile(r"^final \(step (?P<step>\d+)\)$"), "probe.label_final"),
    (re.compile(r"^now \(step (?P<step>\d+), training\)$"), "probe.label_now"),
)


def probe_label(label, locale: str = "en") -> str:
    """A policy's label in the probe, in ``locale`` and made inert (one not known is shown as it is)."""
    for pattern, key in _PROBE_LABELS:
        m = pattern.match(label) if isinstance(label, str) else None
        if m:
            return t(locale, key, step=m["step"])
    return text(label)


def probe_html(result: dict, locale: str = "en") -> str:
    """The history of one prompt: one column per policy (base, snapshots, the latest), one row per sample, each
    cell tinted by the sign of its reward. The same seed for every column, so a row compares like with like. A prompt
    cut to fit the policy's context is said above the table, with how many tokens went."""
    steps = result.get("steps") or []
    if not steps:
        return f"<p class='rloo-empty'>{t(locale, 'probe.none')}</p>"

    def column_head(s: dict) -> str:
        if s.get("mean_reward") is None:
            return f"<th>{probe_label(s['label'], locale)}</th>"
        mean = t(locale, "probe.mean_reward", value=f"{s['mean_reward']:+.3f}")
        return f"<th>{probe_label(s['label'], locale)}<br><span class='rloo-small-num'>{mean}</span></th>"

    head = "<th>#</th>" + "".join(column_head(s) for s in steps)
    empty = f"<i>{t(locale, 'common.empty')}</i>"
    k = max(len(s["samples"]) for s in steps)
    body = []
    for i in range(k):
        cells = [f"<td>{i + 1}</td>"]
        for s in steps:
            if i < len(s["samples"]):
                sample = s["samples"][i]
                cls = _sign_class(sample["reward"], tol=0.05)
                title = text(t(locale, "probe.reward", value=f"{sample['reward']:+.3f}"))
                cells.append(f"<td class='rloo-text {cls}' title='{title}'>{_token_text(sample['text']) or empty}</td>")
            else:
                cells.append("<td></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    cut = prompt_cut_note(result, locale)
    cut = f"<p class='rloo-prompt-cut'>{text(cut)}</p>" if cut else ""
    return (
        f"<div class='rloo-probe'>{cut}<div class='rloo-prompt'>{t(locale, 'probe.prompt')} "
        f"<b>{_token_text(result.get('prompt', ''))}</b>…"
        f"</div><table class='rloo-table rloo-probe-table'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def probe_note(result: dict, locale: str = "en") -> str:
    """'What am I looking at?' for the probe, with its numbers."""
    steps = [s for s in result.get("steps") or [] if s.get("mean_reward") is not None]
    if not steps:
        return ""
    first, last = steps[0], steps[-1]
    every = result.get("snapshot_every")
    kept = result.get("kept")
    return " ".join(
        [
            t(
                locale,
                "probe.note",
                k=text(result.get("num_samples", len(first["samples"]))),
                policies=len(steps),
                seed=text(result.get("seed")),
            ),
            t(
                locale,
                "probe.note_means",
                first=probe_label(first["label"], locale),
                first_mean=f"{first['mean_reward']:+.3f}",
                last=probe_label(last["label"], locale),
                last_mean=f"{last['mean_reward']:+.3f}",
            ),
            t(
                locale,
                f"probe.snapshots_{'every' if every else 'off'}{'_kept' if kept else ''}",
                every=text(every),
                kept=text(kept),
            ),
        ]
    )
