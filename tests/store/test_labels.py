"""A run's label and note (store/labels.py) against texts worked out by hand: what is kept of a hostile text, the
file's size guard at its exact edge, what a corrupt file reads as, and the delete's hidden step."""

import json
import os

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.store import labels
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.listing import list_runs


@pytest.fixture
def run(tmp_path):
    return RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="r1"))


def test_clean_text_replaces_control_characters_keeps_a_notes_newlines_and_cuts_after_trimming():
    hostile = "  a\r\nb\tc\x00d\u200be\u2028f é  "
    assert labels.clean_text(hostile, 80, one_line=False) == "a\nb c d e\u2028f é"
    assert labels.clean_text(hostile, 80, one_line=True) == "a b c d e\u2028f é"
    assert labels.clean_text("   abcdef  ", 3, one_line=True) == "abc"  # trimmed first, then cut


def _write_raw(run, payload: bytes):
    (run.path / labels.NOTES_FILE).write_bytes(payload)


def test_the_size_guard_reads_a_file_of_exactly_the_limit_and_not_one_byte_more(run):
    body = json.dumps({"label": "kept"}).encode()
    _write_raw(run, body + b" " * (labels._MAX_FILE_BYTES - len(body)))
    assert labels.read_notes(run) == {"label": "kept", "note": ""}
    _write_raw(run, body + b" " * (labels._MAX_FILE_BYTES - len(body) + 1))
    assert labels.read_notes(run) == {"label": "", "note": ""}


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe{", b"{not json", b"[" * 100_000 + b"]" * 100_000, b'["label", "x"]', b'{"label": 3, "note": null}'],
    ids=["bytes", "syntax", "deep", "list", "types"],
)
def test_an_unreadable_file_reads_as_no_label_and_no_note(run, payload):
    _write_raw(run, payload[: labels._MAX_FILE_BYTES])
    assert labels.read_notes(run) == {"label": "", "note": ""}


def test_a_file_written_elsewhere_is_cleaned_and_cut_as_it_is_read(run):
    _write_raw(run, json.dumps({"label": "x\ny" + "L" * 100, "note": "line 1\nline 2" + "N" * 3000}).encode())
    got = labels.read_notes(run)
    assert got["label"] == ("x y" + "L" * 100)[: labels.MAX_LABEL_CHARS]
    assert got["note"] == ("line 1\nline 2" + "N" * 3000)[: labels.MAX_NOTE_CHARS]


def test_write_keeps_what_is_not_given_and_clears_what_is_empty(run):
    assert labels.write_notes(run, label="first", note="a note") == {"label": "first", "note": "a note"}
    assert labels.write_notes(run, note="second\nnote") == {"label": "first", "note": "second\nnote"}
    assert labels.write_notes(run, label="") == {"label": "", "note": "second\nnote"}
    stored = json.loads((run.path / labels.NOTES_FILE).read_text())
    assert stored["note"] == "second\nnote" and stored["label"] == "" and isinstance(stored["updated"], float)
    assert labels.read_notes(run) == {"label": "", "note": "second\nnote"}


def test_the_stamp_is_the_files_own_and_moves_with_a_write(run):
    assert labels.notes_stamp(run) == (0, 0, 0)
    labels.write_notes(run, label="a")
    st = os.stat(run.path / labels.NOTES_FILE)
    first = labels.notes_stamp(run)
    assert first == (st.st_mtime_ns, st.st_size, st.st_ino)
    labels.write_notes(run, label="a longer label")
    assert labels.notes_stamp(run) != first and labels.notes_stamp(run)[1] > first[1]


def test_a_delete_first_hides_the_folder_where_no_listing_sees_it(run, monkeypatch):
    root = run.path.parent
    removed = []
    monkeypatch.setattr(labels.shutil, "rmtree", lambda path, **kw: removed.append((path, kw)))
    labels.delete_folder(run)
    ((hidden, kwargs),) = removed
    assert hidden.parent == root and hidden.name.startswith(".deleting-") and len(hidden.name) == len(".deleting-") + 12
    assert sorted(p.name for p in root.iterdir()) == [hidden.name]  # renamed in one step: the run's name is gone
    assert list_runs(root) == [] and kwargs == {"ignore_errors": True}
