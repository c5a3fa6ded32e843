"""Trace text is shown as text, never as Markdown (issue 31, item 2).

A 2-rank job whose `ProfilerStep` is named `ProfilerStep#1 ![x](http://127.0.0.1:9/t.png)` and
whose file names hold Markdown link and image syntax is loaded on the Traces page (its name
defaults to the file name: `st.success`), a file of that kind of name that is no trace is
refused (`st.error`), and the Ranks page builds the job's summaries and opens a rank's timeline
(the step name in its caption, the file names in the job's messages). Every element Streamlit
renders as Markdown on the way (markdown, captions, alerts, toasts, progress texts, expander,
tab, button and metric labels) must hold no link or image syntax a CommonMark + GFM renderer
would act on, and the hostile text must have been shown (escaped) where it belongs.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from mdtext import markdown_links, shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "sample_traces" / "ddp"
BEACON = "![x](http://127.0.0.1:9/t.png)"
STEP = f"ProfilerStep#1 {BEACON}"
FILE = "[a](http:127.0.0.1:9) ![i](t.png) *b* `c` :red[d] rank{}.json.gz"


def _rendered(at) -> list[tuple[str, str]]:
    """(kind, Markdown source) of every element of `at` that Streamlit renders as Markdown."""
    out: list[tuple[str, str]] = []
    for kind in ("markdown", "caption", "success", "error", "warning", "info", "toast", "subheader", "title"):
        out += [(kind, str(e.value)) for e in getattr(at, kind)]
    for kind in ("expander", "tabs", "button", "metric", "checkbox", "selectbox", "text_input", "text_area"):
        out += [(f"{kind} label", str(e.label)) for e in at.get(kind)]
    out += [("progress", e.proto.text) for e in at.get("progress")]
    return out


def _check(at, seen: list[tuple[str, str]]) -> None:
    assert not at.exception, [e.value for e in at.exception]
    for kind, text in _rendered(at):
        assert not markdown_links(text), (kind, text, markdown_links(text))
        seen.append((kind, text))


def _hostile_job(folder: Path) -> list[str]:
    folder.mkdir()
    files = []
    for r in (0, 1):
        doc = json.loads(gzip.decompress((DDP / f"ddp_rank{r}_kineto.json.gz").read_bytes()))
        for e in doc["traceEvents"]:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = STEP
        p = folder / FILE.format(r)
        p.write_bytes(gzip.compress(json.dumps(doc).encode()))
        files.append(str(p))
    return files


def test_trace_text_is_never_rendered_as_markdown(tmp_path, monkeypatch, cache_dir):
    from engine.workspace import Catalog, JobRunner

    if not (DDP / "ddp_rank0_kineto.json.gz").exists():
        pytest.skip("bundled ddp sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.delenv("MYSTIQUE_APP_SCHEDULER", raising=False)
    files = _hostile_job(tmp_path / "job")
    bad = tmp_path / "job" / "![n](n.png) <http:x> notes.json"
    bad.write_text('{"hello": "world"}')
    seen: list[tuple[str, str]] = []
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.switch_page("../pages/traces.py")
    at.run()
    _check(at, seen)
    at.text_area(key="server_paths").input(str(bad))
    at.button(key="load_path").click()
    at.run()
    _check(at, seen)
    assert any(k == "error" and "![n](n.png) <http:x> notes.json" in shown(t) for k, t in seen), seen
    at.text_area(key="server_paths").input("\n".join(files))
    at.button(key="load_path").click()
    at.run()
    _check(at, seen)
    assert any(k == "success" and shown(t) == f"loaded {Path(files[0]).name}" for k, t in seen), seen
    # the Ranks page opens on the loaded trace's files
    at.switch_page("../pages/ranks.py")
    at.run()
    next(t for t in at.text_input if t.label.startswith("Fan-out scheduler")).input("serial")
    at.run()
    _check(at, seen)
    at.button(key="ov_build").click()
    at.run()
    _check(at, seen)
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    done = JobRunner(cat).wait(cat.jobs(kind="rank_summary")[-1]["id"], timeout_s=300)
    assert done["status"].value == "done", done.get("error")
    at.run()
    _check(at, seen)
    at.button(key="ov_open").click()
    at.run()
    _check(at, seen)
    step_captions = [t for k, t in seen if k == "caption" and "events read from the store" in t]
    assert step_captions and STEP in shown(step_captions[-1]), step_captions
