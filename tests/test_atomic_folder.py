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


# Writes in place that are not results, each with why (issue 34 item 6: one atomic writer).
# (file, function): reason.
IN_PLACE = {
    ("engine/trace/cache.py", "_to_parquet"): "inside atomic_folder's temporary folder",
    ("engine/trace/cache.py", "save_cached"): "inside atomic_folder's temporary folder",
    ("engine/trace/store/ingest.py", "_ingest"): "inside atomic_folder's temporary folder",
    ("engine/trace/store/ingest.py", "build"): "inside atomic_folder's temporary folder",
    ("engine/distributed/launch.py", "__init__"): "the progress board: shared counters, not a result",
    ("engine/distributed/launch.py", "launch"): "a rank's stderr log, streamed while it runs",
    ("engine/workspace/jobs.py", "pump"): "a job's log, appended to by its worker while it runs",
    ("engine/workspace/catalog.py", "_unwritable"): "a probe: opened for writing, nothing written",
    ("engine/workspace/schema.py", "_claim_pages_present"): "patches a temporary copy of a damaged catalog",
}
# call -> where its destination is: a positional index or a keyword
_WRITERS = {
    "write_text": None,  # always a path (pathlib)
    "write_bytes": None,
    "to_parquet": (0, "path"),
    "to_csv": (0, "path_or_buf"),
    "savez": (0, "file"),
    "savez_compressed": (0, "file"),
    "write_table": (1, "where"),
    "open": (0, "file"),
    "GzipFile": (None, "fileobj"),
}


def _dest(call, where):
    at, kw = where
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    return call.args[at] if at is not None and len(call.args) > at else None


def _in_place_writes(path) -> list[tuple[str, int, str]]:
    """(function, line, call) of each call in `path` that writes a file in place: a writer whose
    destination is not a file object handed in (an `atomic_fill` / `atomic_copy` callback's)."""
    import ast

    found = []

    def visit(node, fn, params):
        for child in ast.iter_child_nodes(node):
            name, inner = fn, params
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                # a callback (a lambda, a function defined inside another) is handed its file object
                callback = isinstance(child, ast.Lambda) or fn != "<module>"
                inner = {a.arg for a in child.args.args + child.args.kwonlyargs} if callback else set()
                name = getattr(child, "name", fn)
            if isinstance(child, ast.Call):
                f = child.func
                attr = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if attr in _WRITERS:
                    mode = "w"
                    if attr in ("open", "GzipFile"):
                        m = [*child.args[1:2], *(k.value for k in child.keywords if k.arg == "mode")]
                        mode = next(
                            (x.value for x in m if isinstance(x, ast.Constant) and isinstance(x.value, str)), "r"
                        )
                    dest = _dest(child, _WRITERS[attr]) if _WRITERS[attr] else None
                    handed = isinstance(dest, ast.Name) and dest.id in params
                    no_path = attr == "to_csv" and dest is None  # to_csv() returns the text
                    if any(c in mode for c in "wax+") and not handed and not no_path:
                        found.append(
                            (name, child.lineno, f"{attr}({mode!r})" if attr in ("open", "GzipFile") else attr)
                        )
            visit(child, name, inner)

    visit(ast.parse(path.read_text()), "<module>", set())
    return found


def test_every_product_writer_goes_through_the_atomic_writer():
    """engine/, app/ and pages/ write results only through engine.outdir (atomic_write,
    atomic_fill, atomic_copy, atomic_folder, write_json): a crash or a full disk never leaves half
    a file where a reader looks. engine/testing builds test inputs and is not scanned."""
    from conftest import ROOT

    bad, seen = [], set()
    for folder in ("engine", "app", "pages"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel.startswith("engine/testing/"):
                continue
            for fn, line, call in _in_place_writes(p):
                seen.add((rel, fn))
                if (rel, fn) not in IN_PLACE:
                    bad.append(f"{rel}:{line} {fn}: {call}")
    assert not bad, "writes in place (use engine.outdir):\n" + "\n".join(bad)
    assert set(IN_PLACE) <= seen, f"stale entries: {sorted(set(IN_PLACE) - seen)}"


def test_the_writer_scan_finds_a_write_in_place(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import gzip\nfrom pathlib import Path\n"
        "def a(p):\n    Path(p).write_text('x')\n"
        "def b(p, df):\n    df.to_parquet(p / 'x.parquet')\n"
        "def c(p):\n    with gzip.open(p, 'wb') as fh:\n        fh.write(b'x')\n"
        "def d(p, df):\n    atomic_fill(p, lambda fh: df.to_parquet(fh))\n"
        "def e(p):\n    with open(p) as fh:\n        return fh.read()\n"
    )
    assert [(fn, call) for fn, _, call in _in_place_writes(src)] == [
        ("a", "write_text"),
        ("b", "to_parquet"),
        ("c", "open('wb')"),
    ]
