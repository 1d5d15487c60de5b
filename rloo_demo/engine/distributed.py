"""Which process is rank 0, and the record a multi-process run leaves of how it ran.

Under ``accelerate launch --multi_gpu`` or ``torchrun`` every process runs the same ``train()``. Only rank 0 may
create and write the run folder, so every process must know its rank *before* anything is written. A bare
``PartialState()`` does not: on a machine without a GPU it sees no backend and tells every process it is rank 0 of
1. The process group is set up later, when TRL's ``RLOOConfig`` (transformers' ``TrainingArguments``) resets that
state and builds it again with ``cpu=True``; a run folder created before then is created by every rank.
``init_distributed`` sets the group up the way the trainer will, so the answer is right from the first line.

The launch record is the proof that a run really had N processes: world size, backend and, per rank, its pid and
host. Each rank sends its part to rank 0 (``gather_object``), which writes it to ``status.json`` and
``config.yaml`` (a top-level ``launch:`` block that ``RunConfig.load`` sets aside). In a data-parallel run each
rank also records a SHA-256 of its policy parameters before the first step and after the last one: equal across
ranks afterwards means the gradients were all-reduced; different from before means the steps changed the weights.
(A single process records no checksum, nor do DeepSpeed and FSDP runs, whose ranks may hold different slices.)
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import torch

# Plain data-parallel (DDP) keeps a full replica of the weights on every rank, so the replicas can be compared.
# FSDP and DeepSpeed ZeRO-3 hold a different slice per rank, and a single process has nothing to compare with: no
# checksum is recorded for those (it would cost a copy of the weights to the CPU for nothing).
REPLICATED = ("MULTI_CPU", "MULTI_GPU")


def init_distributed():
    """accelerate's ``PartialState``, with the process group set up as the trainer will (gloo on a CPU)."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def gather(obj) -> list:
    """``obj`` from every rank, in rank order (a collective: every rank must call it)."""
    from accelerate.utils import gather_object

    return gather_object([obj])


def param_digest(model) -> str:
    """SHA-256 of a model's parameters, bit for bit, in the order of ``named_parameters``."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def launch_record(accelerator, model) -> dict:
    """How this run was launched, gathered from every rank (a collective). ``model``: the policy before training."""
    from accelerate import PartialState

    state = PartialState()
    kind = accelerator.distributed_type.value
    mine = {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "node_rank": int(os.environ.get("GROUP_RANK", 0)),  # the machine, as torchrun numbers it
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "torch_threads": torch.get_num_threads(),
    }
    if kind in REPLICATED:
        mine["params_sha256_start"] = param_digest(model)
    return {
        "world_size": state.num_processes,
        "backend": state.backend,
        "distributed_type": kind,
        "ranks": gather(mine),
    }


def record_final_params(launch: dict, model, step: int) -> None:
    """Add each rank's parameter checksum after ``step`` to ``launch`` (a collective; rank 0's copy is written)."""
    if launch["distributed_type"] not in REPLICATED:
        return
    for entry, digest in zip(launch["ranks"], gather(param_digest(model)), strict=True):
        entry["params_sha256_end"], entry["params_step"] = digest, step


def write_launch_block(config_yaml: Path, launch: dict) -> None:
    """Append the launch record to a run's config.yaml as a top-level ``launch:`` block (atomically)."""
    import yaml

    public = {k: v for k, v in launch.items() if k != "ranks"}
    public["ranks"] = [{k: r[k] for k in ("rank", "node_rank", "host", "pid")} for r in launch["ranks"]]
    text = config_yaml.read_text().rstrip("\n") + "\n" + yaml.safe_dump({"launch": public}, sort_keys=False)
    tmp = config_yaml.with_name(f".{config_yaml.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, config_yaml)
