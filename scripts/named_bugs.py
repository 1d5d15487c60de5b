"""Put each named bug (the audits' deliberate bugs, by kind) into a scratch copy of the tree, one at a time, and run
the tests that claim its feature: every bug must fail at least one of them. Not part of CI (a few minutes on 2 cores):

    python scripts/named_bugs.py            every bug
    python scripts/named_bugs.py k3 probe   some of them

Each bug is a text replacement in one file; the script stops with an error if the text is no longer there (the
code moved: update the bug, do not drop it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name: (file, the text as it is, the bug, the tests that claim the feature)
BUGS = {
    "compare-columns": (
        "rloo_demo/ui/tabs/compare.py",
        'ui.base: compare_html(result["base"], t(locale, "compare.base"), locale),\n'
        '        ui.trained: compare_html(result["trained"], t(locale, "compare.trained"), locale),',
        'ui.base: compare_html(result["trained"], t(locale, "compare.base"), locale),\n'
        '        ui.trained: compare_html(result["base"], t(locale, "compare.trained"), locale),',
        ["tests/server/test_manage.py", "tests/ui/test_page_pieces.py", "tests/ui/test_forms.py"],
    ),
    "arena-seeds": (
        "rloo_demo/arena.py",
        "seed = base.seed + i",
        "seed = base.seed",
        ["tests/ui/test_lab_views.py", "tests/test_cli.py"],
    ),
    "meter-r": (
        "rloo_demo/engine/variance.py",
        "variance = float((deviations @ deviations.T).diagonal().sum()) / (r - 1)",
        "variance = float((deviations @ deviations.T).diagonal().sum()) / r",
        ["tests/engine/test_variance.py", "tests/test_toy.py"],
    ),
    "k3": (
        "rloo_demo/store/tokens.py",
        "log_ratio = min(ref - logp, 700.0)",
        "log_ratio = min(logp - ref, 700.0)",
        ["tests/ui/test_token_views.py", "tests/ui/test_views.py"],
    ),
    "perplexity": (
        "rloo_demo/eval/evaluation.py",
        'judges[label]["base_perplexity"] = math.exp(-sum(base_logps[label]) / tokens)',
        'judges[label]["base_perplexity"] = math.exp(sum(base_logps[label]) / tokens)',
        ["tests/eval/test_evaluation.py"],
    ),
    "empty-operator": (
        "rloo_demo/server/runner.py",
        "return bool(admin) and isinstance(token, str) and hmac.compare_digest(_bytes(admin), _bytes(token))",
        'return isinstance(token, str) and hmac.compare_digest(_bytes(admin or ""), _bytes(token))',
        ["tests/ui/test_controller.py", "tests/server/test_manage.py"],
    ),
    # the kinds a later audit's deliberate bugs found the suite blind to (each has tests of its own kind now)
    "offset-after-clip": (
        "rloo_demo/advantages.py",
        """        total = math.fsum([*scored, float(offset)])
        if clip_range:  # TRL's test is the same truthiness: ``if self.reward_clip_range:``
            total = min(max(total, float(clip_range[0])), float(clip_range[1]))""",
        """        total = math.fsum(scored)
        if clip_range:  # TRL's test is the same truthiness: ``if self.reward_clip_range:``
            total = min(max(total, float(clip_range[0])), float(clip_range[1]))
        total += float(offset)""",
        ["tests/task/test_rewards.py::test_the_offset_is_summed_before_the_clip_everywhere_as_trl_sums_its_column"],
    ),
    "line-per-client-id": (
        "rloo_demo/public/waiting.py",
        "                if waiting.visitor == ticket.visitor:",
        "                if waiting.owner == ticket.owner:",
        [
            "tests/public/test_fair_share.py::test_a_second_tab_of_a_waiting_visitor_keeps_its_one_place_with_the_new_settings"
        ],
    ),
    "steps-from-count": (
        "rloo_demo/store/summary.py",
        '        out["steps"] = int(max(steps))',
        '        out["steps"] = len(records)',
        [
            "tests/ui/test_run_summary.py::test_every_step_count_of_a_run_with_gaps_is_its_last_step_not_its_number_of_records"
        ],
    ),
    "pending-per-visitor": (
        "rloo_demo/public/admission.py",
        "        key = (visitor, kind)",
        "        key = visitor",
        ["tests/public/test_admission.py::test_a_visitors_places_of_one_kind_leave_its_places_of_another_kind_alone"],
    ),
    "probe-snapshots": (
        "rloo_demo/server/inference.py",
        "lambda f=folder: snapshots.load_snapshot(f, config.policy)",
        "lambda: snapshots.load_snapshot(folder, config.policy)",
        ["tests/store/test_tokens.py"],
    ),
}


def tree_copy(into: Path) -> None:
    """The committed tree plus the working changes to tracked files (``git ls-files``), without build output."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src, dst = ROOT / name.decode(), into / name.decode()
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())


def main(names: list[str]) -> int:
    chosen = names or list(BUGS)
    unknown = [n for n in chosen if n not in BUGS]
    if unknown:
        sys.exit(f"unknown bug(s) {unknown}; known: {', '.join(BUGS)}")
    python = ROOT / ".venv" / "bin" / "python"
    missed = []
    for name in chosen:
        path, before, after, tests = BUGS[name]
        with tempfile.TemporaryDirectory(prefix=f"bug-{name}-") as tmp:
            tmp = Path(tmp)
            tree_copy(tmp)
            text = (tmp / path).read_text()
            if text.count(before) != 1:
                sys.exit(f"{name}: the text to change is no longer in {path} exactly once; update the bug")
            (tmp / path).write_text(text.replace(before, after))
            env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(tmp), RLOO_DEMO_ASSETS=str(ROOT / "assets"))
            cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-x", *tests]
            out = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            failed = [line for line in out.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
            caught = out.returncode != 0 and bool(failed)
            print(f"{name:<16} {'caught' if caught else 'MISSED'}  {failed[0] if failed else out.stdout[-200:]}")
            if not caught:
                missed.append(name)
    print(f"{len(chosen) - len(missed)} of {len(chosen)} named bugs caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
