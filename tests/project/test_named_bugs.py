"""A deliberate bug of each kind the last audit found the suite blind to, put into a scratch copy of the tree by
``scripts/named_bugs.py``, fails the test written for its kind: the offset summed after the clip, the waiting line
keyed by client id, a run's step count taken from its number of records, and places counted per visitor rather
than per visitor and kind.

``python -m pytest tests/project/test_named_bugs.py`` (about 30 s: four short pytest runs in copies of the tree).
"""

import subprocess
import sys

from conftest import ROOT

KINDS = ("offset-after-clip", "line-per-client-id", "steps-from-count", "pending-per-visitor")


def test_a_bug_of_each_kind_fails_its_test():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "named_bugs.py"), *KINDS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.split() and line.split()[0] in KINDS}
    assert out.returncode == 0 and f"{len(KINDS)} of {len(KINDS)} named bugs caught" in out.stdout, out.stdout[-3000:]
    for kind in KINDS:
        assert " caught " in lines[kind] and "FAILED tests/" in lines[kind], lines.get(kind)
