"""One atomic writer for folders (engine.outdir.atomic_folder): the parse cache's entries and the
trace store are filled under a temporary sibling and renamed into place whole (issue 34 item 6)."""

from __future__ import annotations

import pytest

from engine.outdir import atomic_folder


def test_a_failed_fill_keeps_the_old_folder_and_leaves_no_temporary(tmp_path):
    final = tmp_path / "entry"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_folder(final) as tmp:
        (tmp / "new.txt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]
    assert sorted(p.name for p in final.iterdir()) == ["old.txt"]


def test_a_clean_fill_replaces_the_folder_whole(tmp_path):
    final = tmp_path / "entry"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with atomic_folder(final, prefix=".e-") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".e-")
        (tmp / "new.txt").write_text("new")
        assert not (final / "new.txt").exists()  # readers see the old folder until the rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]


def test_a_file_filled_through_a_writer_is_replaced_whole_or_not_at_all(tmp_path):
    from engine.errors import TraceError
    from engine.outdir import atomic_fill

    out = tmp_path / "ranks.parquet"
    out.write_bytes(b"old")

    def broken(fh):
        fh.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(TraceError, match=r"cannot write the summaries: .*space"):
        atomic_fill(out, broken, "cannot write the summaries: {}")
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["ranks.parquet"]
    atomic_fill(out, lambda fh: fh.write(b"new"))
    assert out.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["ranks.parquet"]
