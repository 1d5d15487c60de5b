"""Small caches for readers: a least-recently-used mapping, and a file's stamp to tell when a cached read is stale."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from rloo_demo.store.folder import file_stamp


class LRU(OrderedDict):
    """A small least-recently-used mapping."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_fresh(self, key):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


def stamp(path: Path) -> tuple[int, int, int]:
    """``(mtime in ns, size, inode)`` of a file, ``(0, 0, 0)`` where there is none: a cached read of it is fresh
    while equal (``store.folder.file_stamp``, which the store's own caches use)."""
    return file_stamp(path)
