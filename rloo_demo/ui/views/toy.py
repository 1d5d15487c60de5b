"""The estimator lab's exact toy as the Rollouts tab shows it: the true gradient, and each estimator's exact mean,
bias and variance (``rloo_demo.toy.exact_table``), in the page's language."""

from __future__ import annotations

import math

from rloo_demo.i18n import t
from rloo_demo.toy import sigmoid


def _signed(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value if abs(value) >= 5e-7 else 0.0:+.6f}"  # a bias of 0 up to rounding reads +0.000000


def toy_markdown(result: dict, locale: str = "en") -> str:
    """The settings and the true gradient, one row per estimator, and what the row of RLOO against REINFORCE and Dr.
    GRPO says with these numbers."""
    rows = {r["estimator"]: r for r in result["rows"]}
    head = [t(locale, f"toy.col_{key}") for key in ("estimator", "mean", "bias", "variance", "ratio")]
    lines = [
        t(
            locale,
            "toy.head",
            truth=_signed(result["true_gradient"]),
            eta=f"{result['eta']:g}",
            sigma=f"{sigmoid(result['eta']):.4f}",
            k=result["k"],
            offset=f"{result['offset']:g}",
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---|" * (len(head) - 1),
    ]
    for row in result["rows"]:
        ratio = f"{row['variance_vs_rloo']:.3g}×" if math.isfinite(row["variance_vs_rloo"]) else "–"
        cells = [f"`{row['estimator']}`", _signed(row["mean"]), _signed(row["bias"]), f"{row['variance']:.4g}", ratio]
        lines.append("| " + " | ".join(cells) + " |")
    rloo, reinforce = rows["rloo"], rows["reinforce"]
    if rloo["variance"] > 0:
        lines += [
            "",
            t(
                locale,
                "toy.reading",
                ratio=f"{reinforce['variance'] / rloo['variance']:.3g}",
                shrink=f"{(result['k'] - 1) / result['k']:.3f}",
                grpo=_signed(rows["grpo"]["bias"]),
            ),
        ]
    return "\n".join(lines)
