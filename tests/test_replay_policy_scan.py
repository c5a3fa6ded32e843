"""Every registered operator schema against the replay op policy (engine/replay/oppolicy.py).

Why a scan and not a list: a new torch (or fbgemm_gpu / torchvision) version adds operators; one
with a `str path` argument must be refused without anyone remembering to add it. So this test
walks `torch._C._jit_get_all_schemas()` (a superset of the dispatcher's ops, checked) after
importing every op library replay may load, and judges each argument that can carry a string
with its own, independent reading of the type text: the policy must refuse every op with a
path-like string argument, every op whose name says it does IO, and every op with a string
argument it has not reviewed, while the enum-like options real traces use (`rounding_mode`,
`einsum`'s equation, `gelu`'s approximate, `pad`'s mode, reductions) stay allowed.
"""

from __future__ import annotations

import contextlib
import importlib
import re

import pytest
import torch
from conftest import SAMPLES

from engine.replay import oppolicy
from engine.replay.dispatch import DispatchError, resolve
from engine.replay.reasons import SkipReason

# a string-capable type, read from its text: str, str?, str[], Dict(str, t), Any, a type variable
_STRINGY = re.compile(r"\bstr\b|\bAny\b|(?<![\w.])t[A-Za-z0-9]*(?![\w.])")
# argument names that could name a file, a device or an address
_PATH_LIKE = re.compile(
    r"(file|path|dir|folder|url|uri|name|location|root|dest|src|source|prefix|host|addr|socket|port|module|lib|^f$|^fd$|^fp$)",
    re.IGNORECASE,
)
# reviewed benign names that contain a path-like word: a process group's registered name
# (collectives resolve it in a table), a oneDNN post-op's name, the op named in an error message
_REVIEWED_NAMES = {"group_name", "post_op_name", "api_name"}
_IO_WORDS = re.compile(r"(^|_)(load|save|read|write|open|mmap|dump|file|path|url)(_|$)")


@pytest.fixture(scope="module")
def schemas() -> list:
    for lib in ("fbgemm_gpu", "torchvision", "torchaudio", "torchrec"):  # what dispatch may import
        with contextlib.suppress(Exception):
            importlib.import_module(lib)
    all_schemas = list(torch._C._jit_get_all_schemas())
    seen = {_full(s) for s in all_schemas}
    # plus any dispatcher op the JIT registry does not list (none in torch 2.13; robust to others)
    for full in getattr(torch._C, "_dispatch_get_all_op_names", list)():
        if full not in seen:
            name, _, overload = full.partition(".")
            with contextlib.suppress(RuntimeError):
                all_schemas.append(torch._C._get_schema(name, overload))
    assert len(all_schemas) > 1000 and "aten::from_file" in {s.name for s in all_schemas}
    # our own vLLM stand-ins (engine/replay/standins.py), defined in this process when a test
    # before needed them: plain torch, no I/O, passed by the policy as ours (their string
    # arguments, layer_name among them, name no file)
    from engine.replay.standins import substitution

    return [s for s in all_schemas if not substitution(s.name)]


def _stringy(a) -> bool:
    return bool(_STRINGY.search(str(a.type)))


def _full(s) -> str:
    return s.name + (f".{s.overload_name}" if s.overload_name else "")


def test_every_path_like_string_argument_is_refused(schemas):
    found, missed = [], []
    for s in schemas:
        for a in s.arguments:
            if _stringy(a) and _PATH_LIKE.search(a.name) and a.name not in _REVIEWED_NAMES:
                found.append(f"{_full(s)}({a.name})")
                if oppolicy.refusal(s) is None:
                    missed.append(f"{_full(s)}: {a.type} {a.name}")
    assert not missed, f"ops with path-like string arguments the policy allows: {missed}"
    # the scan really found the known holes (a torch API change that hid them would fail here)
    assert {"aten::from_file(filename)", "aten::from_file.out(filename)", "aten::save(filename)"} <= set(found)


def test_every_unreviewed_string_argument_and_io_name_is_refused(schemas):
    missed = []
    for s in schemas:
        op = s.name.split("::", 1)[1]
        stringy = [a for a in s.arguments if _stringy(a)]
        unreviewed = [a for a in stringy if a.name not in oppolicy.BENIGN_STR_ARGS or "str" not in str(a.type)]
        io_name = bool(_IO_WORDS.search(op)) and stringy
        if (unreviewed or io_name) and oppolicy.refusal(s) is None:
            missed.append(_full(s))
    assert not missed, f"ops with string arguments outside the reviewed options, allowed: {missed[:20]}"


def test_reviewed_string_options_are_not_path_like():
    assert not {n for n in oppolicy.BENIGN_STR_ARGS if _PATH_LIKE.search(n)} - _REVIEWED_NAMES


BENIGN_OPS = [
    ("aten::div", "Tensor_mode"),  # rounding_mode
    ("aten::einsum", ""),  # equation
    ("aten::gelu", ""),  # approximate
    ("aten::gelu_backward", ""),
    ("aten::pad", ""),  # mode
    ("aten::scatter_reduce", "two"),  # reduce
    ("aten::index_reduce", ""),
    ("aten::searchsorted", "Tensor"),  # side
    ("aten::quantile", ""),  # interpolation
    ("aten::meshgrid", "indexing"),
    ("aten::linalg_eigh", ""),  # UPLO
    ("aten::fft_fft", ""),  # norm
    ("aten::linalg_qr", ""),  # mode
    ("aten::_assert_async", "msg"),
    ("aten::_linalg_check_errors", ""),  # api_name
    ("aten::log", ""),  # names near the IO words
    ("aten::_log_softmax", ""),
    ("aten::addmm", ""),
    ("aten::embedding_bag", ""),
]


def test_enum_like_string_options_stay_allowed(schemas):
    by_name = {(s.name, s.overload_name): s for s in schemas}
    refused = {
        f"{n}.{o}": oppolicy.refusal(by_name[(n, o)]) for n, o in BENIGN_OPS if oppolicy.refusal(by_name[(n, o)])
    }
    assert not refused


@pytest.mark.parametrize(
    "name",
    [
        "aten::from_file",
        "aten::from_file.out",
        "aten::save",
        "aten::load",
        "aten::_save_for_mobile",
        "aten::_load_from_file",
        "fbgemm::_load_from_storage",
        "image::read_file",
        "image::decode_png",
        "torchvision::read_file",
        "torchvision::write_file",
        "torchvision::decode_jpeg",
        "torchvision::_read_video_from_file",
        "video_reader::read_video_from_file",
        "torchaudio::ffmpeg_load_audio",
        "profiler::_record_function_enter_new",
        "debugprims::load_tensor",
        "symm_mem::_rendezvous",
        "mylib::dump_to_file",
    ],
)
def test_io_ops_are_refused_by_name_before_any_lookup(name):
    assert oppolicy.denied_name(name)
    with pytest.raises(DispatchError) as e:
        resolve(name, "", ["String"], "cpu")
    assert e.value.reason is SkipReason.UNSAFE_OP and "--allow-trace-code" in str(e.value)


def test_the_gate_is_the_live_schema_not_the_recorded_one():
    # a trace that claims aten::from_file takes no path is judged by the registered schema
    lying = "aten::from_file(int filename, bool? shared=None, int? size=0) -> Tensor"
    with pytest.raises(DispatchError) as e:
        resolve("aten::from_file", lying, ["String", "Bool", "Int"], "cpu")
    assert e.value.reason is SkipReason.UNSAFE_OP
    # with the opt-in the same record resolves to the real overload
    res = resolve("aten::from_file", "", ["String", "Bool", "Int"], "cpu", allow_trace_code=True)
    assert res.overload._schema.name == "aten::from_file"


def _plan_skips(path, allow: bool) -> dict[int, str]:
    import engine.trace as T
    from engine.graph import replay_ops
    from engine.replay.plan import build_plan

    trace = T.load(path)
    ops = trace.ops[trace.ops["rank"] == trace.ops["rank"].min()] if "rank" in trace.ops.columns else trace.ops
    ids = replay_ops(trace, rank=int(ops["rank"].min())) if "rank" in ops.columns else replay_ops(trace)
    plan = build_plan(ops, ids, device="cpu", allow_trace_code=allow)
    return {s.op_id: str(s.reason) for s in plan.steps if s.reason}


_SAMPLE_FILES = sorted(p.relative_to(SAMPLES) for p in SAMPLES.glob("*/*_et.json.gz"))


@pytest.mark.parametrize("rel", _SAMPLE_FILES, ids=str)
def test_policy_skips_no_op_of_any_bundled_sample(rel, cache_dir):
    """The gate costs real traces nothing: the same ops are skipped with and without the opt-in."""
    default, opted = _plan_skips(SAMPLES / rel, False), _plan_skips(SAMPLES / rel, True)
    assert SkipReason.UNSAFE_OP.value not in default.values() and default == opted


@pytest.mark.slow
def test_policy_skips_no_op_of_the_shared_traces(shared_et, cache_dir):
    default, opted = _plan_skips(shared_et, False), _plan_skips(shared_et, True)
    assert SkipReason.UNSAFE_OP.value not in default.values() and default == opted
