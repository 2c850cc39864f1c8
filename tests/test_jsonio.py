"""The one atomic writer (`ascp.jsonio`): a file or a folder is the old one or the whole new one,
a failure leaves no temporary file behind, and `fsync` flushes the file(s) and the folder."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ascp.errors import AscpError
from ascp.jsonio import atomic_writer, read_jsonl, staged_folder


class Boom(Exception):
    pass


def _record_fsyncs(monkeypatch) -> list[str]:
    """Replace os.fsync by one that records what kind of thing each call flushed."""
    kinds: list[str] = []
    real = os.fsync

    def fake(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        kinds.append("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other")
        real(fd)

    monkeypatch.setattr(os, "fsync", fake)
    return kinds


def test_atomic_writer_writes_text_and_bytes_readable_by_others(tmp_path):
    with atomic_writer(tmp_path / "a.txt") as handle:
        handle.write("héllo\n")
    with atomic_writer(tmp_path / "b.bin", "wb") as handle:
        handle.write(b"\x00\x01")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]


def test_a_failure_in_the_block_leaves_neither_target_nor_temporary_file(tmp_path):
    with pytest.raises(Boom), atomic_writer(tmp_path / "new.json") as handle:
        handle.write("partial")
        raise Boom
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.json").write_text("old")
    with pytest.raises(Boom), atomic_writer(tmp_path / "old.json", "wb", fsync=True) as handle:
        handle.write(b"partial")
        raise Boom
    assert [p.name for p in tmp_path.iterdir()] == ["old.json"] and (tmp_path / "old.json").read_text() == "old"


def test_the_handle_names_the_temporary_file_for_writers_by_path(tmp_path):
    with atomic_writer(tmp_path / "copy.gguf", "wb") as handle:
        assert os.path.dirname(handle.name) == str(tmp_path) and handle.name != str(tmp_path / "copy.gguf")
        with open(handle.name, "wb") as other:  # as llama.cpp's converter writes it
            other.write(b"converted")
    assert (tmp_path / "copy.gguf").read_bytes() == b"converted"


def test_atomic_writer_errors(tmp_path):
    with pytest.raises(AscpError, match="does not exist; create it first"), atomic_writer(tmp_path / "no" / "x"):
        pass
    with pytest.raises(ValueError), atomic_writer(tmp_path / "x", "a"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_fsync_flushes_the_file_and_its_folder_only_when_asked(tmp_path, monkeypatch):
    kinds = _record_fsyncs(monkeypatch)
    with atomic_writer(tmp_path / "plain.txt") as handle:
        handle.write("x")
    assert kinds == []
    with atomic_writer(tmp_path / "durable.txt", fsync=True) as handle:
        handle.write("x")
    assert kinds == ["file", "dir"]


def test_staged_folder_fsync_flushes_every_file_and_the_folders(tmp_path, monkeypatch):
    kinds = _record_fsyncs(monkeypatch)
    with staged_folder(tmp_path / "out") as tmp:
        (tmp / "a").write_text("a")
    assert kinds == []
    with staged_folder(tmp_path / "durable", fsync=True) as tmp:
        (tmp / "a").write_text("a")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b").write_text("b")
    assert kinds.count("file") == 2 and kinds.count("dir") >= 3  # sub, the staged folder, out, its parent
    assert (tmp_path / "durable" / "sub" / "b").read_text() == "b"


@pytest.mark.parametrize("whole", [False, True])
def test_staged_folder_publishes_all_or_nothing(tmp_path, whole):
    out = tmp_path / "out"
    with pytest.raises(Boom), staged_folder(out, whole=whole) as tmp:
        (tmp / "one").write_text("1")
        raise Boom
    assert list(tmp_path.iterdir()) == []  # no out, no staged folder
    with staged_folder(out, whole=whole) as tmp:
        (tmp / "one").write_text("1")
        (tmp / "two").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["one", "two"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    (out / "kept").write_text("k")
    with pytest.raises(Boom), staged_folder(out, whole=whole) as tmp:
        (tmp / "one").write_text("new 1")
        raise Boom
    assert (out / "one").read_text() == "1" and sorted(p.name for p in out.iterdir()) == ["kept", "one", "two"]
    with staged_folder(out, whole=whole) as tmp:
        (tmp / "one").write_text("new 1")
    assert (out / "one").read_text() == "new 1"
    assert sorted(p.name for p in out.iterdir()) == (["one"] if whole else ["kept", "one", "two"])
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_line_json_cannot_hold_in_python_is_one_sentence(tmp_path):
    # An integer past Python's digit limit makes json.loads raise a plain ValueError.
    path = tmp_path / "big.jsonl"
    path.write_text('{"a": ' + "1" * 5000 + "}\n", encoding="utf-8")
    with pytest.raises(AscpError, match=r"big\.jsonl:1 is not valid JSON .*; each line must be one JSON object\.$"):
        read_jsonl(path)


# ----- disks that refuse writes -------------------------------------------------------------------

def refused(code: int, filename: object = None) -> OSError:
    """The error a write raises on a disk that refuses it (a simulated fault where no tmpfs can be mounted)."""
    return OSError(code, os.strerror(code), filename)


@pytest.mark.parametrize("code, reason", [(28, "no space is left on the device"), (30, "its file system is read-only")])
def test_a_refused_write_is_one_sentence_and_leaves_the_old_file(tmp_path, code, reason):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(AscpError) as caught, atomic_writer(target) as handle:
        handle.write("new" * 10_000)
        raise refused(code)
    assert str(caught.value) == (f"could not write {target}: {reason}; free space or choose another output folder, "
                                 "then rerun (nothing was written).")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_refused_write_in_a_staged_folder_publishes_nothing(tmp_path):
    out = tmp_path / "run"
    # the sentence names the file as it would have been published, not the hidden temporary folder
    with pytest.raises(AscpError, match=rf"^could not write {out / 'b.jsonl'}: no space is left"), \
            staged_folder(out) as tmp:
        (tmp / "a.jsonl").write_text("first")
        raise refused(28, tmp / "b.jsonl")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError), staged_folder(out) as tmp:  # other errors are not disk errors
        raise FileNotFoundError(2, "missing", "input.json")
    assert list(tmp_path.iterdir()) == []


def test_on_a_real_full_disk_nothing_half_written_and_a_rerun_after_space_returns_completes(small_disk):
    from conftest import fill_disk

    disk = small_disk("64k")
    filler = fill_disk(disk, leave=2048)
    out = disk / "run"
    full = rf"^could not write {out}.*: no space is left on the device; free space"
    with pytest.raises(AscpError, match=full), staged_folder(out) as tmp:
        (tmp / "rows.jsonl").write_text("row\n" * 5_000)
    assert sorted(p.name for p in disk.iterdir()) == [".filler"]
    with pytest.raises(AscpError, match="no space is left on the device"), atomic_writer(disk / "x.json") as h:
        h.write("y" * 20_000)
    assert sorted(p.name for p in disk.iterdir()) == [".filler"]
    filler.unlink()  # space returns
    with staged_folder(out) as tmp:
        (tmp / "rows.jsonl").write_text("row\n" * 5_000)
    assert (out / "rows.jsonl").read_text() == "row\n" * 5_000


def test_a_real_read_only_folder_is_one_sentence(small_disk):
    disk = small_disk("64k", read_only=True)
    read_only = "its file system is read-only"
    with pytest.raises(AscpError, match=rf"^could not write {disk / 'x.json'}: {read_only}"), \
            atomic_writer(disk / "x.json") as handle:
        handle.write("y")
    with pytest.raises(AscpError, match=rf"^could not write {disk / 'run'}: {read_only}"), staged_folder(disk / "run"):
        pass


@pytest.mark.parametrize("torn", [b"", b'{"half": ', b"x" * 200_000])
def test_the_record_log_cuts_a_torn_tail_and_appends_whole_lines(tmp_path, torn):
    """The one append-only log: a tail torn by a writer that died (short, or longer than one read block)
    is cut before the next line, which is appended whole; what readers parse is every whole line."""
    from ascp.jsonio import append_line

    path = tmp_path / "log.jsonl"
    lines = [json.dumps({"n": i, "text": "é" * i}).encode() + b"\n" for i in range(3)]
    for line in lines[:2]:
        append_line(path, line)
    with path.open("ab") as handle:
        handle.write(torn)
    append_line(path, lines[2])
    assert path.read_bytes() == b"".join(lines)
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [0, 1, 2]
