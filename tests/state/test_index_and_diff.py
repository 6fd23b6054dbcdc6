"""Snapshot index serialisation and validation; the diff and file-equality rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparza.state.backup import (
    SCHEMA_VERSION,
    DirIndex,
    FileBlob,
    FileIndex,
    FileMetadata,
    SnapshotIndex,
    SnapshotIndexError,
    SnapshotMetadata,
    are_same_dir,
    are_same_file,
    crc32_file,
    dir_diff,
)
from sparza.state.backup.diff import file_metadata


def _file(path: Path, blob: str = "b1") -> FileIndex:
    return FileIndex(path.name, (FileBlob(blob, 0),), file_metadata(path), crc32_file(path))


def _index() -> SnapshotIndex:
    meta = FileMetadata(1, 2, 3, "rw-r--r--")
    f = FileIndex("000001.sst", (FileBlob("b2", 10), FileBlob("b1", 0)), meta, 42)
    sub = DirIndex("sub", (FileIndex("x", (FileBlob("b3"),), meta, 1),), (), (), (DirIndex("gone"),))
    root = DirIndex("", (f,), (FileIndex("old", (FileBlob("b9"),), meta, 7),), (sub,), ())
    return SnapshotIndex(1234, SnapshotMetadata("5", "job", "1", "Partition 0", "counts"), root, "prev-id")


def test_index_round_trips_through_json_with_samza_field_names() -> None:
    index = _index()
    data = index.to_bytes()
    parsed = json.loads(data)
    assert parsed["schema-version"] == SCHEMA_VERSION
    assert parsed["prev-snapshot-index-blob-id"] == "prev-id"
    assert set(parsed["dir-index"]) == {"dir-name", "files-present", "files-removed", "sub-dirs-present",
                                        "sub-dirs-removed"}
    again = SnapshotIndex.from_bytes(data)
    assert again.metadata == index.metadata and again.prev_snapshot_index_blob_id == "prev-id"
    # blobs come back in offset order whatever order they were written in
    assert [b.offset for b in again.dir_index.files_present[0].blobs] == [0, 10]
    assert {b.blob_id for b in again.dir_index.present_blobs()} == {"b1", "b2", "b3"}
    assert {b.blob_id for b in again.dir_index.removed_blobs()} == {"b9"}


def test_unknown_fields_are_ignored_and_newer_schema_refused() -> None:
    parsed = json.loads(_index().to_bytes())
    parsed["some-future-field"] = 1
    assert SnapshotIndex.from_json(parsed).creation_time_ms == 1234
    parsed["schema-version"] = SCHEMA_VERSION + 1
    with pytest.raises(SnapshotIndexError, match="upgrade"):
        SnapshotIndex.from_json(parsed)
    with pytest.raises(SnapshotIndexError):
        SnapshotIndex.from_bytes(b"not json")


def test_a_blob_both_present_and_removed_is_refused() -> None:
    meta = FileMetadata(0, 0, 1)
    f = FileIndex("a", (FileBlob("same"),), meta, 0)
    with pytest.raises(SnapshotIndexError, match="both present and removed"):
        DirIndex("", (f,), (FileIndex("b", (FileBlob("same"),), meta, 0),))


def test_are_same_file_rules(tmp_path: Path) -> None:
    small = tmp_path / "MANIFEST-000001"
    small.write_bytes(b"abc")
    remote = _file(small)
    assert are_same_file(small, remote)
    small.write_bytes(b"abd")  # same size, different content: caught by CRC
    assert not are_same_file(small, remote)
    small.write_bytes(b"abcd")
    assert not are_same_file(small, remote)  # size
    sst = tmp_path / "000007.sst"
    sst.write_bytes(b"x" * 100)
    remote_sst = _file(sst)
    sst.write_bytes(b"y" * 100)
    assert are_same_file(sst, remote_sst)  # immutable SSTs: name + size, checksum skipped
    assert not are_same_file(sst, remote_sst, compare_immutable_checksums=True)
    sst.write_bytes(b"x" * 100)
    os.chmod(sst, 0o400)  # owner lost write permission
    assert not are_same_file(sst, remote_sst)
    os.chmod(sst, 0o644 & ~0o044 | 0o600)  # only the owner bits are compared: group/other do not matter
    assert are_same_file(sst, remote_sst)
    assert not are_same_file(tmp_path / "missing", remote_sst)


def test_dir_diff_added_retained_removed_recursively(tmp_path: Path) -> None:
    local = tmp_path / "cp"
    (local / "keep-dir").mkdir(parents=True)
    (local / "new-dir" / "inner").mkdir(parents=True)
    (local / "same.sst").write_bytes(b"s")
    (local / "changed").write_bytes(b"new")
    (local / "added").write_bytes(b"a")
    (local / "LOCK").write_bytes(b"")  # never backed up
    (local / "keep-dir" / "k").write_bytes(b"k")
    (local / "new-dir" / "inner" / "n").write_bytes(b"n")
    old = tmp_path / "old"
    old.mkdir()
    (old / "changed").write_bytes(b"old")
    (old / "gone").write_bytes(b"g")
    remote = DirIndex("", (_file(local / "same.sst", "s"), _file(old / "changed", "c"), _file(old / "gone", "g")),
                      (), (DirIndex("keep-dir", (_file(local / "keep-dir" / "k", "k"),)),
                           DirIndex("removed-dir", (_file(old / "gone", "rg"),))))
    diff = dir_diff(local, remote)
    assert sorted(p.name for p in diff.files_added) == ["added", "changed"]
    assert [f.file_name for f in diff.files_retained] == ["same.sst"]
    assert sorted(f.file_name for f in diff.files_removed) == ["changed", "gone"]
    assert [d.dir_name for d in diff.sub_dirs_added] == ["new-dir"]
    assert [d.dir_name for d in diff.sub_dirs_retained] == ["keep-dir"]
    assert [d.dir_name for d in diff.sub_dirs_removed] == ["removed-dir"]
    assert sorted(p.name for p in diff.walk_added()) == ["added", "changed", "n"]
    assert sorted(f.file_name for f in diff.walk_removed()) == ["changed", "gone", "gone"]
    assert diff.counts()["files-to-retain"] == 2  # same.sst and keep-dir/k
    first = dir_diff(local, None)
    assert len(first.walk_added()) == 5 and not first.walk_retained()  # LOCK is never backed up


def test_are_same_dir(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a").write_bytes(b"a")
    (d / "sub" / "b").write_bytes(b"b")
    index = DirIndex("", (_file(d / "a", "1"),), (), (DirIndex("sub", (_file(d / "sub" / "b", "2"),)),))
    assert are_same_dir(d, index)
    (d / "LOG").write_text("rocksdb info log")  # ignored
    assert are_same_dir(d, index)
    (d / "extra").write_bytes(b"")
    assert not are_same_dir(d, index)
    (d / "extra").unlink()
    (d / "sub" / "b").write_bytes(b"c")
    assert not are_same_dir(d, index)
    assert not are_same_dir(tmp_path / "nope", index)
