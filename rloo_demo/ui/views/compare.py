"""The Compare tab's texts: base and trained samples side by side, and the judges of their text."""

from __future__ import annotations

from rloo_demo.eval.judges import collapse_warning
from rloo_demo.i18n import t, tn
from rloo_demo.ui.views.common import _judge, breakable, prompt_cut_note, text


def compare_table(samples: list[dict], locale: str = "en") -> tuple[list[str], list[list]]:
    """Headers and rows of one side of Compare: scores first, then the completion. A score equal to the reward in
    every row (one reward function of weight 1, the default) is not a column of its own: its name goes into the
    reward's header, and the completion, the thing being compared, gets the room."""
    names = list(samples[0]["scores"]) if samples else []
    same = [k for k in names if all(abs(s["scores"][k] - s["reward"]) < 1e-12 for s in samples)]
    shown = [k for k in names if k not in same]
    reward = t(locale, "col.reward") + (f" ({', '.join(same)})" if same else "")
    rows = [[round(s["reward"], 3), *[round(s["scores"][k], 3) for k in shown], s["text"]] for s in samples]
    return [reward, *shown, t(locale, "col.completion")], rows


def _num(value, spec: str = "+.3f") -> str:
    """A number cell: kept on one line by the table's CSS (``rloo-num``), a dash where there is none."""
    shown = format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"
    return f"<td class='rloo-num'>{shown}</td>"


def compare_html(samples: list[dict], heading: str, locale: str = "en") -> str:
    """One side of Compare as a table that reads at any width: each sample's numbers on a row (one line each,
    headers broken only between words), and under them its completion, whole, across the table's width: beside the
    numbers, the text was squeezed to a sliver on a phone (``COMPARE_CSS`` in ``ui.tabs.compare``)."""
    headers, rows = compare_table(samples, locale)
    empty = f"<i>{t(locale, 'common.empty')}</i>"
    head = "".join(f"<th>{breakable(h)}</th>" for h in ["#", *headers[:-1]])
    span = len(headers) - 1
    body = "".join(
        f"<tbody><tr><td class='rloo-num' rowspan='2'>{i + 1}</td>{''.join(_num(v) for v in row[:-1])}</tr>"
        f"<tr><td class='rloo-text' colspan='{span}'>{text(row[-1]) or empty}</td></tr></tbody>"
        for i, row in enumerate(rows)
    )
    return (
        f"<div class='rloo-cmp-box'><h4 class='rloo-cmp-head'>{text(heading)}</h4>"
        f"<table class='rloo-table rloo-cmp'><thead><tr>{head}</tr></thead>{body}</table></div>"
    )


def eval_report_html(result: dict, locale: str = "en") -> str:
    """The held-out evaluation as a small table (each measure, base, trained, and the difference) and the sample
    completions as a second one; the CLI prints the same figures as text (``eval.evaluation.format_report``)."""
    base, trained = result.get("base_mean_reward"), result.get("trained_mean_reward")
    diff = result.get("difference")
    rewards = breakable(", ".join(str(n) for n in result.get("trained_on") or ["?"]))
    rows = [(t(locale, "eval.mean_reward", rewards=rewards), base, trained, diff)]
    heldout = set(result.get("heldout_scorers") or [])
    for name, m in (result.get("per_function") or {}).items():
        tag = t(locale, "eval.heldout" if name in heldout else "eval.trained_on")
        b, tr = m.get("base"), m.get("trained")
        d = tr - b if all(isinstance(v, int | float) for v in (b, tr)) else None
        rows.append((f"{breakable(name)} <span class='rloo-small-num'>({tag})</span>", b, tr, d))
    body = [f"<tr><td class='rloo-text'>{r[0]}</td>{_num(r[1])}{_num(r[2])}{_num(r[3])}</tr>" for r in rows]
    ci = result.get("difference_ci95")
    if isinstance(ci, list | tuple) and len(ci) == 2:
        interval = f"[{_judge(ci[0], '+.3f')}, {_judge(ci[1], '+.3f')}]"
        # across the three number columns: in the difference's alone it made that column too wide for a phone
        body.append(
            f"<tr><td class='rloo-text'>{t(locale, 'eval.ci')}</td>"
            f"<td class='rloo-num' colspan='3'>{interval}</td></tr>"
        )
    kl = result.get("kl_trained_vs_base")
    body.append(f"<tr><td class='rloo-text'>{t(locale, 'eval.kl')}</td><td></td>{_num(kl, '.3f')}<td></td></tr>")
    judges = result.get("judges") if isinstance(result.get("judges"), dict) else {}
    jb, jt = judges.get("base") or {}, judges.get("trained") or {}
    for key, spec, label in (
        ("distinct_2", ".3f", "eval.distinct"),
        ("repetition", ".3f", "eval.repetition"),
        ("base_perplexity", ".1f", "eval.perplexity"),
    ):
        if key in jb or key in jt:
            body.append(
                f"<tr><td class='rloo-text'>{t(locale, label)}</td>{_num(jb.get(key), spec)}"
                f"{_num(jt.get(key), spec)}<td></td></tr>"
            )
    cols = ("eval.col_measure", "eval.col_base", "eval.col_trained", "eval.col_diff")
    head = "".join(f"<th>{t(locale, c)}</th>" for c in cols)
    caption = t(
        locale,
        "eval.caption",
        prompts=_count(locale, "eval.prompts.plural", result.get("num_prompts")),
        samples=_count(locale, "eval.samples.plural", result.get("samples_per_prompt", 1)),
        seed=text(result.get("seed", "?")),
    )
    out = [
        # in a box of its own that scrolls sideways: four columns of Georgian headers outgrew a phone's width
        f"<div class='rloo-table-box'><table class='rloo-table rloo-eval'><caption>{caption}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    ]
    if result.get("collapse_warning"):
        warning = collapse_warning(jt, jb, locale) if jt else None
        out.append(f"<p class='rloo-eval-warning'><b>{text(warning or result['collapse_warning'])}</b></p>")
    samples = [s for s in result.get("samples") or [] if isinstance(s, dict)][:4]
    if samples:
        # each sample: its prompt across the table, then the base's and the trained policy's text under it, each
        # with the whole width (three columns side by side broke them a letter a line on a phone)
        names = {"base": t(locale, "eval.col_base"), "trained": t(locale, "eval.col_trained")}
        groups = "".join(
            f"<tbody><tr><td class='rloo-prompt-cell' colspan='2'>{t(locale, 'eval.col_prompt')}: "
            f"<b>{text(s.get('prompt', ''))}</b>…</td></tr>"
            + "".join(
                f"<tr><td class='rloo-side'>{names[k]}</td><td class='rloo-text'>{text(s.get(k, ''))}</td></tr>"
                for k in ("base", "trained")
            )
            + "</tbody>"
            for s in samples
        )
        out.append(
            f"<table class='rloo-table rloo-eval-samples'><caption>{t(locale, 'eval.samples')}</caption>"
            f"{groups}</table>"
        )
    return "".join(out)


def compare_summary(result: dict, locale: str = "en") -> str:
    """Both models' mean reward on the compared prompt, the judges of their text, and the collapse warning (written
    again in ``locale`` from the judges it was made of); first, where the prompt was cut to fit, how much."""
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
    cut = prompt_cut_note(result, locale)
    return f"{cut}<br>{line}" if cut else line


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


def _count(locale: str, key: str, n) -> str:
    """'1 sample', '4 samples' (in ``locale``'s plural forms); a count that is no whole number as '?'."""
    if isinstance(n, bool) or not isinstance(n, int):
        return tn(locale, key, 0, n="?")  # the form of many
    return tn(locale, key, n)
