"""Policy snapshots during a run, and the probe that samples one prompt from each of them.

Every ``snapshot_every`` steps rank 0 saves the policy's weights to ``runs/<name>/snapshots/step-000025/``
(safetensors and config; a LoRA run saves its adapter). The tokenizer is the base policy's, which training never
changes. A snapshot is written to a hidden folder and renamed, so it appears whole or not at all.

At most ``KEEP_SNAPSHOTS`` are kept. When one more would pass the cap, the spacing doubles (every 25 steps, then
every 50, 100, ...): every second snapshot goes and only steps on the new spacing are saved from then on, so the kept
ones stay evenly spread over the whole run (a prompt's history wants the early steps as much as the late ones) and
none is written only to be deleted. The newest policy is always in the probe anyway (the run's final
model, or a copy of the one in training). The embedded policy is 5 MB in fp32, so a run keeps at most 40 MB of
snapshots; they count in the runs folder's retention like any other file.

The probe samples K completions of one prompt from the base policy, every kept snapshot and the latest policy,
with the same seed for each, so that what changes from one step to the next is the model, not the dice.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from transformers import TrainerCallback

from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample

log = logging.getLogger(__name__)

KEEP_SNAPSHOTS = 8
FOLDER = "snapshots"
_NAME = re.compile(r"step-(\d{6,})")


def snapshot_name(step: int) -> str:
    return f"step-{step:06d}"


def list_snapshots(run_path: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of a run's complete snapshots, oldest first (hidden folders are being written or removed)."""
    root = Path(run_path) / FOLDER
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = []
    for p in entries:
        m = _NAME.fullmatch(p.name)
        if m and ((p / "config.json").is_file() or (p / "adapter_config.json").is_file()):
            found.append((int(m.group(1)), p))
    return sorted(found)


def spacing(step: int, every: int, keep: int = KEEP_SNAPSHOTS) -> int:
    """Steps between kept snapshots once training has reached ``step``: ``every``·2^k, the smallest with at most
    ``keep`` multiples up to ``step``."""
    stride = max(1, every)
    while step // stride > keep:
        stride *= 2
    return stride


def steps_to_drop(steps: Sequence[int], stride: int) -> list[int]:
    """The snapshots off the current spacing."""
    return sorted(s for s in steps if s % stride)


def keep_history(run_path: str | Path, model: Callable[[], object], step: int, every: int, keep: int = KEEP_SNAPSHOTS):
    """What a run does at the end of ``step``: save a snapshot if the step is on the current spacing, and delete the
    ones that fell off it. ``model`` is called only when a snapshot is saved."""
    if every <= 0 or step % every:
        return
    stride = spacing(step, every, keep)
    if step % stride == 0:
        save_snapshot(run_path, model(), step)
    root = Path(run_path) / FOLDER
    for old in steps_to_drop([s for s, _ in list_snapshots(run_path)], stride):
        _remove(root / snapshot_name(old))


def save_snapshot(run_path: str | Path, model, step: int) -> Path:
    """Save ``model``'s weights as the snapshot of ``step``: written to a hidden folder, then renamed into place."""
    root = Path(run_path) / FOLDER
    root.mkdir(exist_ok=True)
    final = root / snapshot_name(step)
    tmp = root / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        model.save_pretrained(tmp, safe_serialization=True)  # a PEFT model saves its adapter only
        if final.exists():  # the same step saved again (a resumed run): the new one wins
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _remove(folder: Path) -> None:
    """Rename first, then delete: a reader never sees a half-deleted snapshot under its real name."""
    hidden = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}.drop")
    try:
        os.replace(folder, hidden)
    except OSError:
        return
    shutil.rmtree(hidden, ignore_errors=True)


def load_snapshot(folder: str | Path, base_policy: str):
    """The policy saved in a snapshot folder, ready for sampling (a LoRA snapshot is merged into its base)."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        base, _ = load_policy(base_policy)
        return PeftModel.from_pretrained(base, folder).merge_and_unload().eval()
    return AutoModelForCausalLM.from_pretrained(folder, dtype="float32").eval()


class SnapshotCallback(TrainerCallback):
    """Saves a snapshot every ``every`` steps, from rank 0, at the step boundary (after the optimiser update)."""

    def __init__(self, run_path: str | Path, every: int, model: Callable[[], object], keep: int = KEEP_SNAPSHOTS):
        self.run_path, self.every, self.model, self.keep = Path(run_path), every, model, keep

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            keep_history(self.run_path, self.model, state.global_step, self.every, self.keep)


# ----------------------------------------------------------------------------- the probe


def probe(
    policies: Iterable[tuple[int, str, Callable[[], object]]],
    tokenizer,
    prompt: str,
    num_samples: int,
    max_new_tokens: int,
    seed: int,
    scorer: Callable[[list[str], list[str]], tuple[dict, list[float]]],
    temperature: float = 1.0,
    top_p: float = 1.0,
    asked=None,
) -> list[dict]:
    """Sample ``num_samples`` completions of ``prompt`` from each policy, with the same seed for every one (and the
    run's own temperature and top-p, so they read like its rollouts). ``asked`` is the prompt as the policy sees it
    (``task.data.as_run_prompt``: a chat run's messages, with its system prompt; default ``prompt``); the scorer
    reads ``prompt``, the typed text, as Compare's does.

    ``policies`` yields ``(step, label, load)``; each model is loaded only when its turn comes and dropped after, so
    one snapshot at a time is in memory. A snapshot removed meanwhile (thinned by the run) is skipped. Returns one
    entry per policy: ``{"step", "label", "samples": [{"text", "reward"}], "mean_reward"}``."""

    out = []
    for step, label, load in policies:
        try:
            model = load()
        except OSError:
            log.info("snapshot of step %s went away before the probe reached it", step)
            continue
        samples = sample(
            model, tokenizer, prompt if asked is None else asked, num_samples, max_new_tokens, temperature, top_p, seed
        )
        texts = [s["text"] for s in samples]
        del model
        _, rewards = scorer([prompt] * len(texts), texts)
        out.append(
            {
                "step": step,
                "label": label,
                "samples": [{"text": t, "reward": float(r)} for t, r in zip(texts, rewards, strict=True)],
                "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            }
        )
    return out


__all__ = [
    "KEEP_SNAPSHOTS",
    "SnapshotCallback",
    "keep_history",
    "list_snapshots",
    "load_snapshot",
    "probe",
    "save_snapshot",
    "spacing",
    "steps_to_drop",
]
