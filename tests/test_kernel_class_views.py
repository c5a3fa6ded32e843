"""The kernel classifier (engine.trace.kernels) reaches what users read: `mystique info --json`
and Explore's Analysis and Breakdown tables (issue 32: GEMM matched none of MI300X's hipBLASLt
`Cijk_` kernels and counted flash attention as GEMM). Golden values are counted from the raw
JSON of the shared traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
MI300_BERT = "tracelens_mi300_bert_small/mi300_bert_small.json.gz"
H100_BERT = "tracelens_bert_small/h100_bert_small.json.gz"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw(path: Path) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("cat") in GPU]


def _table(at, *cols: str):
    """The page's dataframe with these columns (AppTest keeps no key for a plain st.dataframe)."""
    return next(d.value for d in at.dataframe if set(cols) <= set(d.value.columns))


def test_info_json_has_the_kernel_class_table_with_hipblaslt_gemm(shared_traces, cache_dir, capsys):
    path = shared_traces / MI300_BERT
    raw = _raw(path)
    assert main(["info", str(path), "--json"]) == 0
    classes = {c["class"]: c for c in json.loads(capsys.readouterr().out)["kernel_classes"]}
    cijk = [e for e in raw if e["name"].startswith("Cijk_")]
    assert len(cijk) == 26  # hand count: hipBLASLt/Tensile GEMMs of this BERT
    assert classes["gemm"]["kernels"] == len(cijk)
    assert classes["gemm"]["share"] == pytest.approx(sum(e["dur"] for e in cijk) / sum(e["dur"] for e in raw), abs=1e-4)
    assert sum(c["kernels"] for c in classes.values()) == len(raw)  # every GPU task in one class
    assert main(["info", str(path)]) == 0
    assert "kernel classes  gemm 44.6% (26)" in capsys.readouterr().out


def test_explore_analysis_and_breakdown_show_kernel_classes(shared_traces, tmp_path, monkeypatch, cache_dir):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    path = shared_traces / H100_BERT
    raw = _raw(path)
    flash = {e["name"] for e in raw if "flash" in e["name"].lower()}
    assert flash  # the H100 BERT runs flash attention (CUTLASS in its name)
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.text_area(key="server_paths").input(str(path))
    at.text_input(key="path_name").input("h100 bert")
    at.button(key="load_path").click()
    at.run()
    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("Analysis")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    classes = _table(at, "class", "kernels", "ms").set_index("class")
    assert int(classes["kernels"].sum()) == len(raw)
    assert {"gemm", "attention"} <= set(classes.index)
    kernels = _table(at, "name", "class", "self_us")
    assert set(kernels.loc[kernels["name"].isin(flash), "class"]) == {"attention"}  # never GEMM
    at.radio(key="explore_view").set_value("Breakdown")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert _table(at, "class", "kernels", "ms")["class"].tolist() == classes.index.tolist()
