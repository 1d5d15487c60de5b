"""How much memory a policy needs, known before it loads or downloads, and a refusal when it cannot fit.

The parameter count comes from the safetensors headers (8 bytes of length, then a JSON table of every tensor's dtype
and shape), so nothing is loaded: from the files of a local folder or of the HF cache, or, for a hub id that is not
cached, from the hub's safetensors metadata (``huggingface_hub.get_safetensors_metadata``, a few small requests)
before any download starts. A model without safetensors files is measured by the size of its weight files.

The policy loads in fp32 (``--bf16`` is autocast over fp32 weights), 4 bytes a parameter, and RLOO keeps a frozen
reference copy beside it, unless ``beta`` is 0 (no reference) or LoRA trains an adapter (the reference is the base
with the adapter off). Those copies are a floor, not an estimate: gradients, AdamW's two moments and the
activations come on top. A run whose floor is larger than the free memory of the device it would train on (the GPU
if there is one, else the machine's RAM) is refused with both sizes in the message.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from rloo_demo.errors import UserError
from rloo_demo.models.hub import ASSETS_DIR, is_offline

BYTES_PER_PARAMETER = 4  # fp32 master weights, bf16 or not
MAX_HEADER_BYTES = 100 * 2**20  # safetensors caps its header at 100 MB


class TooLarge(UserError):
    """A model that cannot fit in this machine's memory (the message gives its size and the memory free)."""


def safetensors_parameters(path: str | Path) -> int:
    """Parameters in one ``.safetensors`` file, from its header alone (the tensors are not read)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{Path(path).name} is not a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{Path(path).name} has a {length}-byte header, more than safetensors allows")
        header = json.loads(f.read(length))
    total = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        count = 1
        for dim in info.get("shape", []):
            count *= int(dim)
        total += count
    return total


def folder_parameters(folder: str | Path) -> int | None:
    """Parameters of the model in ``folder``: its safetensors headers, else its ``.bin`` / ``.pt`` files' bytes
    read as fp32 (a floor for a half-precision file); None if it has no weight files."""
    folder = Path(folder)
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        return sum(safetensors_parameters(p) for p in shards)
    weights = [p for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth") and p.is_file()]
    if weights:
        return sum(p.stat().st_size for p in weights) // BYTES_PER_PARAMETER
    return None


def hub_parameters(repo_id: str) -> int | None:
    """Parameters of a hub model: from the cached files, else (online) from the hub's safetensors metadata, without
    downloading the weights; None where neither can tell (offline and not cached: ``resolve_model`` says so)."""
    from huggingface_hub import snapshot_download

    try:
        return folder_parameters(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        pass  # not cached
    if is_offline():
        return None
    try:
        from huggingface_hub import get_safetensors_metadata

        metadata = get_safetensors_metadata(repo_id)
    except Exception:
        return None  # no safetensors on the hub, or no such repo: resolve_model's download gives the clear error
    return sum(metadata.parameter_count.values())


def policy_parameters(name: str) -> int | None:
    """Parameters of a policy by name (embedded, folder or hub id), or None where nothing tells."""

    name = name.strip()
    if name.startswith("embedded:"):
        folder = ASSETS_DIR / name.removeprefix("embedded:")
        return folder_parameters(folder) if folder.is_dir() else None
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return folder_parameters(path) if path.is_dir() else None
    return hub_parameters(name)


def free_memory() -> tuple[int, str]:
    """``(bytes free, where)`` on the device a run trains on: the first GPU, else this machine's RAM."""
    import torch

    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return int(free), "GPU"
    import psutil

    return int(psutil.virtual_memory().available), "RAM"


def copies(config) -> int:
    """Copies of the weights a run holds: the policy, and its reference unless beta is 0 or LoRA is on."""
    return 1 if config.use_lora or config.beta == 0 else 2


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def check_policy_fits(config, free: tuple[int, str] | None = None) -> int | None:
    """Refuse (``TooLarge``) a policy whose weights and reference copy cannot fit in the free memory; returns the
    bytes they need (None when the size is unknown, which is not refused)."""
    try:
        parameters = policy_parameters(config.policy)
    except (OSError, ValueError):  # an unreadable weight file: loading it says what is wrong
        parameters = None
    if parameters is None:
        return None
    need = parameters * BYTES_PER_PARAMETER * copies(config)
    available, where = free if free is not None else free_memory()
    if need > available:
        held = "the policy and its reference copy" if copies(config) == 2 else "the policy"
        raise TooLarge(
            f"policy {config.policy!r} has {parameters / 1e9:.2f}B parameters ({_gb(parameters * 4)} in fp32); "
            f"{held} need {_gb(need)}, before gradients and optimizer states, but only {_gb(available)} of "
            f"{where} is free here. Use a smaller model, or --use-lora (the reference is then the base model with "
            "the adapter off, not a second copy)."
        )
    return need
