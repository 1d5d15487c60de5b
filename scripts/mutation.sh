#!/usr/bin/env bash
# Mutation testing of the whole package, chunk by chunk (not part of CI): mutmut puts one small bug at a time into a
# chunk's modules and runs the chunk's tests that execute that code; a bug no test notices survives.
#   bash scripts/mutation.sh --list          the chunks (scripts/mutation_chunks.toml), their modules and time caps
#   bash scripts/mutation.sh core store      these chunks, one after the other
#   bash scripts/mutation.sh all             every chunk (several hours on 2 cores)
# Each chunk runs in its own copy of the tree, build/mutation/<chunk>/, whose pyproject.toml has the chunk's modules
# and tests in [tool.mutmut]; its table is printed and kept in build/mutation/<chunk>/scores.txt.
# MUTATION_RECHECK=1 keeps a chunk's last run and runs again only its survivors (and its mutants with no tests)
# against today's tests: minutes instead of the whole chunk after tests were written against a survivor list. The
# package must be as it was when that run started (its mutants are of that code); the tests and docs are copied anew.
# MUTATION_MINUTES overrides a chunk's time cap (mutants not reached are reported as not checked),
# MUTATION_JOBS sets the mutants tested at once (default: the number of cores), MUTATION_KEEP=1 reuses a chunk's
# results (mutants it has checked are not run again). Survivors: cd build/mutation/<chunk> && mutmut results, and
# mutmut show <name> for one as a diff.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${MUTATION_PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  bash scripts/setup.sh --dev
  PY=.venv/bin/python
fi
PY=$(realpath -s "$PY")
MUTMUT="$(dirname "$PY")/mutmut"
chunks_file=scripts/mutation_chunks.toml

chunk_names() { "$PY" -c 'import sys, tomllib; print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["chunks"]))' "$chunks_file"; }

if [ $# -eq 0 ] || [ "$1" = --list ]; then
  "$PY" - "$chunks_file" <<'EOF'
import sys, tomllib
for name, chunk in tomllib.load(open(sys.argv[1], "rb"))["chunks"].items():
    print(f"{name:<8} {chunk['minutes']:>3} min  {chunk['about']}\n{'':<15}{' '.join(chunk['modules'])}")
EOF
  [ $# -eq 0 ] && echo "usage: bash scripts/mutation.sh CHUNK... | all | --list" >&2
  exit 0
fi
names=("$@")
[ "$1" = all ] && read -r -a names <<<"$(chunk_names)"
known=" $(chunk_names) "
for name in "${names[@]}"; do
  [[ "$known" == *" $name "* ]] || { echo "error: no chunk named $name (bash scripts/mutation.sh --list)" >&2; exit 2; }
done

jobs=${MUTATION_JOBS:-$(nproc)} # before OMP_NUM_THREADS is set: nproc honours it
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One thread per mutant: the mutants run in parallel already, and torch's threads would only fight over the cores.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unset PYTHONPATH # the mutated copy in mutants/ must be what the tests import
export RLOO_DEMO_ASSETS="$root/assets" # mutants/ holds the code and tests only, not the embedded models

for name in "${names[@]}"; do
  work=build/mutation/$name
  recheck=()
  if [ "${MUTATION_RECHECK:-0}" = 1 ]; then
    [ -d "$work/mutants" ] || { echo "error: chunk $name has no earlier run in $work to recheck" >&2; exit 2; }
    diff -rq -x __pycache__ rloo_demo "$work/rloo_demo" >/dev/null || {
      echo "error: rloo_demo/ changed since chunk $name ran: its mutants are of the old code; run it afresh" >&2
      exit 2
    }
    # The survivors and the mutants no test reached, from mutmut's result files (mutants/<module>.py.meta).
    read -r -a recheck <<<"$(cd "$work" && "$PY" -c '
import json
from pathlib import Path
from mutmut.stats import status_by_exit_code
names = [name for meta in Path("mutants").glob("rloo_demo/**/*.py.meta")
         for name, code in json.loads(meta.read_text())["exit_code_by_key"].items()
         if status_by_exit_code[code] in ("survived", "no tests")]
print(" ".join(names))')"
    echo "== chunk $name: rechecking ${#recheck[@]} survivors against today's tests" >&2
    [ ${#recheck[@]} -gt 0 ] || continue
  elif [ "${MUTATION_KEEP:-0}" != 1 ]; then
    # A fresh start by default: mutmut links each mutant to the tests that ran its code when it first collects its
    # stats, and later only adds new tests, so after an edited test a kept mutants/ can leave a mutant unlinked.
    rm -rf "$work"
  fi
  mkdir -p "$work"
  tree=$(git describe --always --dirty) # the tree copied below, named as it was when the chunk started
  # What the tests read besides the package: the embedded models, the launch configs, the docs, the examples
  extra=(assets configs docs examples scripts app.py requirements.txt requirements-dev.txt)
  for path in rloo_demo tests "${extra[@]}"; do
    [ ${#recheck[@]} -gt 0 ] && [ "$path" = rloo_demo ] && continue # the mutated copy stays as it is
    rm -rf "${work:?}/$path"
    cp -r "$path" "$work/"
    if [ ${#recheck[@]} -gt 0 ] && [ -e "$work/mutants/$path" ]; then # mutmut copies these only when absent
      rm -rf "${work:?}/mutants/$path"
      cp -r "$path" "$work/mutants/"
    fi
  done
  find "$work" -name __pycache__ -prune -exec rm -rf {} +
  # The chunk's own [tool.mutmut]: this pyproject.toml's settings, with the chunk's modules and tests.
  "$PY" - "$chunks_file" "$name" pyproject.toml "${extra[@]}" >"$work/pyproject.toml" <<'EOF'
import json, re, sys, tomllib
from pathlib import Path

chunk = tomllib.load(open(sys.argv[1], "rb"))["chunks"][sys.argv[2]]
text = Path(sys.argv[3]).read_text()
settings = tomllib.loads(text)["tool"]["mutmut"]
missing = [t for t in chunk["tests"] if not Path(t.split("::")[0]).is_file()]
if missing:
    sys.exit(f"error: chunk {sys.argv[2]} names test files that do not exist: {missing}")
settings["only_mutate"] = [f"rloo_demo/{m}" if m.endswith("*") else f"rloo_demo/{m}.py" for m in chunk["modules"]]
settings["pytest_add_cli_args_test_selection"] = chunk["tests"]
settings["pytest_add_cli_args"] = settings.get("pytest_add_cli_args", []) + chunk.get("select", [])
settings["also_copy"] = sys.argv[4:]  # into mutants/, where the tests run
# Drop the [tool.mutmut] table (up to the next table) and write the chunk's in its place: JSON's strings, numbers
# and lists are TOML's too.
text = re.sub(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n)*", "", text, flags=re.M)
print(text.rstrip() + "\n\n[tool.mutmut]")
for key, value in settings.items():
    print(f"{key} = {json.dumps(value)}")
EOF
  minutes=${MUTATION_MINUTES:-$("$PY" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["chunks"][sys.argv[2]]["minutes"])' "$chunks_file" "$name")}
  echo "== chunk $name: at most $minutes min, $jobs at once, in $work" >&2
  start=$(date +%s)
  status=0
  (cd "$work" && timeout --signal=INT --kill-after=120 "$((minutes * 60))" \
    nice -n 10 "$MUTMUT" run --max-children "$jobs" "${recheck[@]}") || status=$?
  [ "$status" = 0 ] || echo "mutmut ended with exit status $status (124: stopped at the time cap)" >&2
  wall=$((($(date +%s) - start) / 60))

  # Per-module table from mutmut's result files (mutants/<module>.py.meta).
  (cd "$work" && "$PY" - "$name" "$wall" "$tree" "${#recheck[@]}" <<'EOF'
import json, sys
from pathlib import Path

from mutmut.stats import status_by_exit_code

name, wall, commit, recheck = sys.argv[1:5]
recheck = int(recheck)
rows, totals = [], {}
for meta in sorted(Path("mutants").glob("rloo_demo/**/*.py.meta")):
    module = str(meta.relative_to("mutants/rloo_demo"))[: -len(".py.meta")]
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    if not codes:
        continue
    count = {}
    for code in codes.values():
        status = status_by_exit_code[code]
        count[status] = count.get(status, 0) + 1
    rows.append((module, count))
    for status, n in count.items():
        totals[status] = totals.get(status, 0) + n


def line(module, count):
    caught = count.get("killed", 0) + count.get("timeout", 0) + count.get("caught by type check", 0)
    checked = sum(count.values()) - count.get("not checked", 0) - count.get("skipped", 0)
    score = f"{100 * caught / checked:5.1f}%" if checked else "    –"
    cells = [count.get(s, 0) for s in ("killed", "timeout", "survived", "no tests", "suspicious", "not checked")]
    return f"{module:<28} {sum(count.values()):>6} " + " ".join(f"{c:>8}" for c in cells) + f"  {score}"


out = [f"chunk {name} at {commit}: {wall} min" + (" (its survivors rechecked)" if recheck else ""),
       f"{'module':<28} {'total':>6} {'killed':>8} {'timeout':>8} {'survived':>8} {'no tests':>8} {'suspic.':>8} "
       f"{'unchecked':>8}  score"]
out += [line(module, count) for module, count in rows]
if len(rows) > 1:
    out.append(line("all", totals))
out.append("score = (killed + timeout) / (total - not checked); 'no tests' counts as survived")
print("\n".join(out))
Path("scores.txt").write_text("\n".join(out) + "\n")
EOF
  )
done
