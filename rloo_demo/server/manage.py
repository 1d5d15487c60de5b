"""Who may rename, annotate or delete which run: the checks in front of ``store.labels``.

On a local server (not public mode) whoever reaches the page owns the machine, so any run may be labelled, noted or
deleted. On a public server a visitor may touch only its own runs: those whose ``status.json`` records the hash of
its client id (``owner``, written at Start; ``gates.owner_digest``), or any run with the operator's token as the
client id. Never a run that is training, here or in another process (the CLI): its folder is being written.

Every check runs before anything is written, in an order that touches the disk as late as possible: a name that is
not a plain run name (``"../x"``, a path, a lone surrogate) is refused by ``Runner.run`` before any file is looked
at, a label or note past its limit is refused with the limit named (never silently cut).
"""

from __future__ import annotations

import hmac

from rloo_demo.config import text_problem
from rloo_demo.errors import Busy, InputError, NotOwner
from rloo_demo.i18n import Message
from rloo_demo.public.gates import Caller, owner_digest
from rloo_demo.public.limits import Limits
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import MAX_LABEL_CHARS, MAX_NOTE_CHARS, delete_folder, read_notes, write_notes
from rloo_demo.store.process import is_alive


def _text(field: str, value, limit: int) -> str | None:
    """A label or note as sent: None (keep), or a text within ``limit`` characters; anything else is refused."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(Message("manage.not_text", field=Message(f"manage.{field}")))
    problem = text_problem(value)
    if problem:
        raise InputError(Message("manage.bad_text", field=Message(f"manage.{field}"), problem=problem))
    if len(value) > limit:
        raise InputError(
            Message("manage.too_long", field=Message(f"manage.{field}"), chars=f"{len(value):,}", limit=f"{limit:,}")
        )
    return value


class RunManager:
    """Label, note and delete runs on disk, each after the checks above."""

    def __init__(self, runner: Runner, limits: Limits):
        self.runner = runner
        self.limits = limits

    def _editable(self, name, caller: Caller, what: str) -> RunFolder:
        run = self.runner.run(name)  # NotFound for anything but a run folder's plain name, before the disk
        status = run.status()
        if self.runner.get_active(name) is not None or (status.get("status") == "running" and is_alive(status)):
            raise Busy(Message("manage.training", name=name, what=Message(f"manage.{what}")))
        if self.limits.public and not self._owns(status, caller):
            raise NotOwner(Message("manage.not_yours", name=name, what=Message(f"manage.{what}")))
        return run

    def _owns(self, status: dict, caller: Caller) -> bool:
        client = caller.client_id
        if not isinstance(client, str) or not client or len(client) > 200 or text_problem(client):
            return False
        if self.runner.is_admin(client):
            return True
        owner = status.get("owner")
        return isinstance(owner, str) and hmac.compare_digest(owner.encode(), owner_digest(client).encode())

    def may_manage(self, name, caller: Caller) -> bool:
        """Whether ``caller`` may label, note or delete the run now (for a page to show its buttons)."""
        try:
            self._editable(name, caller, "changed")
        except (Busy, NotOwner, InputError):
            return False
        return True

    def set_notes(self, name, label, note, caller: Caller) -> dict:
        """Set a run's label and/or note (None keeps one; an empty text clears it); returns what is stored."""
        label = _text("label", label, MAX_LABEL_CHARS)
        note = _text("note", note, MAX_NOTE_CHARS)
        run = self._editable(name, caller, "renamed")
        if label is None and note is None:
            return read_notes(run)
        return write_notes(run, label=label, note=note)

    def delete(self, name, caller: Caller) -> str:
        """Delete a run's folder, and its copy on the sync target (``store.sync``); returns its name."""
        run = self._editable(name, caller, "deleted")
        delete_folder(run)
        self.runner.forget(run.name)  # else a restart on a fresh disk would bring it back
        return run.name
