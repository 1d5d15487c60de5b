#!/usr/bin/env bash
# Mutation testing of the engine modules (not part of CI): mutmut puts one small bug at a time into the modules
# listed in pyproject.toml's [tool.mutmut] only_mutate and runs their fast tests; a bug no test notices survives.
#   bash scripts/mutation.sh                         every listed module (about 30 minutes on 2 cores)
#   bash scripts/mutation.sh advantages ui/controller store  only these modules or subpackages (under rloo_demo/, no .py)
# MUTATION_MINUTES caps the wall time (default 40; mutants not reached are reported as not checked),
# MUTATION_JOBS sets the mutants tested at once (default: the number of cores); MUTATION_KEEP=1 reuses mutants/.
# Results stay in mutants/: `mutmut results` lists the survivors, `mutmut show <name>` shows one as a diff.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MUTATION_PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  bash scripts/setup.sh --dev
  PY=.venv/bin/python
fi
MUTMUT="$(dirname "$PY")/mutmut"
jobs=${MUTATION_JOBS:-$(nproc)} # before OMP_NUM_THREADS is set: nproc honours it
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One thread per mutant: the mutants run in parallel already, and torch's threads would only fight over the cores.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unset PYTHONPATH # the mutated copy in mutants/ must be what the tests import
export RLOO_DEMO_ASSETS="$PWD/assets" # mutants/ holds the code and tests only, not the embedded models

patterns=()
for module in "$@"; do
  module=${module%.py}
  module=${module%/}
  if [ -f "rloo_demo/$module.py" ] || [ -d "rloo_demo/$module" ]; then
    patterns+=("rloo_demo.${module//\//.}.*") # a module, or a subpackage (every module in it)
  else
    echo "skipping $module: there is no rloo_demo/$module.py or rloo_demo/$module/" >&2
  fi
done
if [ $# -gt 0 ] && [ ${#patterns[@]} -eq 0 ]; then
  echo "error: none of the modules exists" >&2
  exit 2
fi

# A fresh start by default: mutmut links each mutant to the tests that ran its code when it first collects its
# stats, and later only adds new tests, so after an edited test a kept mutants/ can leave a mutant unlinked.
[ "${MUTATION_KEEP:-0}" = 1 ] || rm -rf mutants
start=$(date +%s)
status=0
timeout --signal=INT --kill-after=120 "$((${MUTATION_MINUTES:-40} * 60))" \
  nice -n 10 "$MUTMUT" run --max-children "$jobs" "${patterns[@]}" || status=$?
[ "$status" = 0 ] || echo "mutmut ended with exit status $status (124: stopped at the time cap)" >&2
echo "wall time: $((($(date +%s) - start) / 60)) min"

# Per-module table from mutmut's result files (mutants/<module>.py.meta).
"$PY" - "${patterns[@]}" <<'EOF'
import fnmatch, json, sys
from pathlib import Path

from mutmut.stats import status_by_exit_code

patterns = sys.argv[1:]
rows, totals = [], {}
for meta in sorted(Path("mutants").glob("rloo_demo/**/*.py.meta")):
    module = str(meta.relative_to("mutants"))[: -len(".py.meta")].replace("/", ".")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    codes = {k: v for k, v in codes.items() if not patterns or any(fnmatch.fnmatch(k, p) for p in patterns)}
    if not codes:
        continue
    count = {}
    for code in codes.values():
        status = status_by_exit_code[code]
        count[status] = count.get(status, 0) + 1
    rows.append((module, count))
    for status, n in count.items():
        totals[status] = totals.get(status, 0) + n


def line(name, count):
    caught = count.get("killed", 0) + count.get("timeout", 0) + count.get("caught by type check", 0)
    checked = sum(count.values()) - count.get("not checked", 0) - count.get("skipped", 0)
    score = f"{100 * caught / checked:5.1f}%" if checked else "    –"
    cells = [count.get(s, 0) for s in ("killed", "timeout", "survived", "no tests", "suspicious", "not checked")]
    return f"{name:<28} {sum(count.values()):>6} " + " ".join(f"{c:>8}" for c in cells) + f"  {score}"


print(f"{'module':<28} {'total':>6} {'killed':>8} {'timeout':>8} {'survived':>8} {'no tests':>8} {'suspic.':>8} "
      f"{'unchecked':>8}  score")
for module, count in rows:
    print(line(module, count))
if len(rows) > 1:
    print(line("all", totals))
print("score = (killed + timeout) / (total - not checked); 'no tests' counts as survived")
EOF
