"""Resolve model and dataset names to something loadable, offline first.

A name is one of:
- ``embedded:<asset>``: a model that ships in ``assets/`` (the default policy and reward model);
- a local folder;
- a Hugging Face Hub id, served from the local HF cache and downloaded only where the hub is reachable.

Resolution happens before any model loads, so a typo or an uncached id offline fails in well under a second with
a message that names the id, says that the hub could not be reached, and names the embedded alternative.
"""

from __future__ import annotations

import os
from pathlib import Path

from rloo_demo.errors import UserError

ASSETS_DIR = Path(os.environ.get("RLOO_DEMO_ASSETS", Path(__file__).resolve().parents[2] / "assets"))
EMBEDDED_POLICY = "embedded:tiny-imdb-gpt2"
EMBEDDED_CLASSIFIER = "embedded:tiny-imdb-sentiment"


class ResolveError(UserError):
    """A model or dataset name that cannot be loaded here; the message says what to do instead."""


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model(name: str, alternative: str = EMBEDDED_POLICY) -> str:
    """A local folder for ``name`` (downloading a hub id only where the hub is reachable).

    ``alternative`` is the embedded name the error message suggests.
    """
    if not name or not name.strip():
        raise ResolveError(f"no model given; use {alternative!r}")
    name = name.strip()
    if name.startswith("embedded:"):
        folder = ASSETS_DIR / name.removeprefix("embedded:")
        if not (folder / "config.json").is_file():
            raise ResolveError(
                f"embedded model {name!r} is missing from the assets folder; rebuild it with the script in "
                "scripts/ or set RLOO_DEMO_ASSETS to the folder that holds it"
            )
        return str(folder)
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise ResolveError(f"model folder {name!r} does not exist or has no config.json")
        return str(path)
    return _snapshot(name, "model", alternative)


def resolve_dataset(name: str) -> str:
    """A local snapshot folder of a hub dataset id (see ``resolve_model``)."""
    return _snapshot(name, "dataset", "embedded:imdb")


def _snapshot(repo_id: str, repo_type: str, alternative: str) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except Exception as exc:
        raise ResolveError(f"{repo_id!r} is neither a local folder nor a valid hub {repo_type} id ({exc})") from None
    try:
        return snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
    except Exception:
        pass  # not cached: try the hub below, unless offline
    if is_offline():
        raise ResolveError(
            f"{repo_type} {repo_id!r} is not in the local Hugging Face cache and the hub cannot be reached "
            f"(HF_HUB_OFFLINE=1). Use the embedded {repo_type} {alternative!r}, or download {repo_id!r} on a machine "
            "with network access into HF_HOME first."
        )
    try:
        return snapshot_download(repo_id, repo_type=repo_type, etag_timeout=5)
    except Exception as exc:
        raise ResolveError(
            f"{repo_type} {repo_id!r} could not be fetched: the Hugging Face Hub could not be reached or has no such "
            f"repo ({type(exc).__name__}). Use the embedded {repo_type} {alternative!r}, or check the id."
        ) from None


def load_hub_dataset(repo_id: str, split: str = "train"):
    """Rows of one split of a hub dataset, from the cache offline."""
    from datasets import load_dataset

    folder = resolve_dataset(repo_id)
    return load_dataset(folder, split=split)
