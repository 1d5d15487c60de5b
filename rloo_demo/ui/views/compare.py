"""The Compare tab's texts: base and trained samples side by side, and the judges of their text."""

from __future__ import annotations

from rloo_demo.eval.judges import collapse_warning
from rloo_demo.i18n import t
from rloo_demo.ui.views.common import _judge, text


def compare_table(samples: list[dict], locale: str = "en") -> tuple[list[str], list[list]]:
    """Headers and rows of one side of Compare: scores first (the completion is the wide column and would push
    them out of view), then the completion."""
    names = list(samples[0]["scores"]) if samples else []
    rows = [[round(s["reward"], 3), *[round(s["scores"][k], 3) for k in names], s["text"]] for s in samples]
    return [t(locale, "col.reward"), *names, t(locale, "col.completion")], rows


def compare_summary(result: dict, locale: str = "en") -> str:
    """Both models' mean reward on the compared prompt, the judges of their text, and the collapse warning (written
    again in ``locale`` from the judges it was made of)."""
    mean = {k: sum(s["reward"] for s in result[k]) / len(result[k]) for k in ("base", "trained")}
    line = t(
        locale,
        "compare.summary",
        rewards=text(" + ".join(result["trained_on"])),
        base=f"{mean['base']:+.3f}",
        trained=f"{mean['trained']:+.3f}",
        seed=text(result["seed"]),
    )
    judges = result.get("judges")
    if isinstance(judges, dict) and "base" in judges and "trained" in judges:
        line += "<br>" + judges_line(judges, locale)
    if result.get("collapse_warning"):
        judged = judges if isinstance(judges, dict) and isinstance(judges.get("trained"), dict) else None
        warning = collapse_warning(judged["trained"], judged.get("base"), locale) if judged else None
        line += f"<br>**{text(warning or result['collapse_warning'])}**"
    return line


def judges_line(judges: dict, locale: str = "en") -> str:
    """'distinct-2 0.91 → 0.12 · repetition ... · base perplexity ...' (base → trained)."""
    b, tr = judges.get("base") or {}, judges.get("trained") or {}
    return t(
        locale,
        "compare.judges",
        d_base=_judge(b.get("distinct_2"), ".2f"),
        d_trained=_judge(tr.get("distinct_2"), ".2f"),
        r_base=_judge(b.get("repetition"), ".2f"),
        r_trained=_judge(tr.get("repetition"), ".2f"),
        p_base=_judge(b.get("base_perplexity"), ".0f"),
        p_trained=_judge(tr.get("base_perplexity"), ".0f"),
    )
