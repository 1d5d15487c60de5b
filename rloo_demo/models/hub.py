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
from rloo_demo.i18n import Message

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
        raise ResolveError(Message("hub.no_model", alternative=repr(alternative)))
    name = name.strip()
    if name.startswith("embedded:"):
        folder = ASSETS_DIR / name.removeprefix("embedded:")
        if not (folder / "config.json").is_file():
            raise ResolveError(Message("hub.embedded_missing", name=repr(name)))
        return str(folder)
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise ResolveError(Message("cfg.policy_missing", path=repr(name)))
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
        raise ResolveError(
            Message("hub.bad_id", id=repr(repo_id), kind=Message(f"hub.{repo_type}"), detail=str(exc))
        ) from None
    try:
        return snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
    except Exception:
        pass  # not cached: try the hub below, unless offline
    if is_offline():
        raise ResolveError(Message(f"hub.offline_{repo_type}", id=repr(repo_id), alternative=repr(alternative)))
    try:
        return snapshot_download(repo_id, repo_type=repo_type, etag_timeout=5)
    except Exception as exc:
        raise ResolveError(
            Message(
                f"hub.unreachable_{repo_type}", id=repr(repo_id), kind=type(exc).__name__, alternative=repr(alternative)
            )
        ) from None


def load_hub_dataset(repo_id: str, split: str = "train"):
    """Rows of one split of a hub dataset, from the cache offline."""
    from datasets import load_dataset

    folder = resolve_dataset(repo_id)
    return load_dataset(folder, split=split)
