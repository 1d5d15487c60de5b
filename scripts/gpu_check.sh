#!/usr/bin/env bash
# The GPU checks in one go, to run as it is wherever a CUDA GPU exists:
#   1. 2 RLOO steps of a small instruct model from the local HF cache with bf16 (transformers generation),
#   2. the same with --use-vllm (TRL's colocate mode), if vllm is installed,
#   3. infer on the trained run (the chat template in, the user turn and reply out),
# and the mean step time of each, from the runs' own metrics. Everything runs offline (HF_HUB_OFFLINE=1 unless set).
#
#   bash scripts/gpu_check.sh                                   # HuggingFaceTB/SmolLM2-135M-Instruct
#   GPU_CHECK_MODEL=Qwen/Qwen2.5-0.5B-Instruct bash scripts/gpu_check.sh
#
# Put the model in the cache first, on a machine with network: HF_HUB_OFFLINE=0 huggingface-cli download <model>.
# Exit status: 0 all checks passed, 1 a check failed, 2 nothing to check here (no GPU, or the model is not cached).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
MODEL=${GPU_CHECK_MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}
OUT=${GPU_CHECK_OUT:-runs/gpu-check}
STEPS=${GPU_CHECK_STEPS:-2}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
export TOKENIZERS_PARALLELISM=false

say() { printf 'gpu_check: %s\n' "$*"; }

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  say "no CUDA GPU is visible to torch here ($("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'torch not importable'))."
  say "nothing to check: run this on a machine with an NVIDIA GPU and a CUDA build of torch (see Dockerfile.gpu)."
  exit 2
fi
"$PY" -c "import torch; p = torch.cuda.get_device_properties(0); print(f'gpu_check: GPU {p.name}, {p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}')"
if ! "$PY" -c "from rloo_demo.models.hub import resolve_model; resolve_model('$MODEL')" >/dev/null 2>&1; then
  say "$MODEL is not in the local Hugging Face cache (HF_HOME=${HF_HOME:-~/.cache/huggingface})."
  say "download it once with network: HF_HUB_OFFLINE=0 huggingface-cli download $MODEL (or set GPU_CHECK_MODEL)."
  exit 2
fi

failed=0
stamp=$(date +%Y%m%d-%H%M%S)

check() {  # check NAME [extra flags]: 2 steps, then the mean step time from metrics.jsonl
  local name="gpu-$1-$stamp"; shift
  say "--- $name: $MODEL, $STEPS steps, bf16 $*"
  if "$PY" -m rloo_demo train --policy "$MODEL" --bf16 --max-steps "$STEPS" --prompts-per-step 4 \
      --num-generations 4 --max-new-tokens 64 --learning-rate 1e-6 --output-dir "$OUT" --run-name "$name" "$@"; then
    "$PY" - "$OUT/$name" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
times = [r["step_time"] for r in records if isinstance(r.get("step_time"), (int, float))]
config = (run / "config.yaml").read_text()
status = json.loads((run / "status.json").read_text())["status"]
print(f"gpu_check: {run.name}: {status}, {len(records)} steps, mean step time {sum(times) / max(len(times), 1):.2f} s "
      f"(first step {times[0]:.2f} s, includes warm-up)" if times else f"gpu_check: {run.name}: {status}, no step times")
PY
    "$PY" -m rloo_demo infer --run "$OUT/$name" --prompt "Recommend one film for a rainy evening." --max-new-tokens 48
  else
    say "FAILED: $name (see the error above and $OUT/$name/status.json)"
    failed=1
  fi
}

check bf16
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  check bf16-vllm --use-vllm
else
  say "vllm is not installed: skipping the vLLM check (pip install vllm; it brings the torch build it needs)."
fi

if [ "$failed" = 0 ]; then say "all checks passed; runs in $OUT"; else say "some checks FAILED"; fi
exit "$failed"
