"""ET tensor type strings -> torch dtype names ("Tensor(c10::BFloat16)" -> "bfloat16").

The ET observer writes the C++ scalar type name (`c10::toString`/`typeid`-style names such as
"float", "long int", "c10::Half", "unsigned char"); older and newer PyTorch builds spell some
differently, so the table accepts every spelling we know, plus ScalarType names ("Float",
"BFloat16", ...). Unknown names map to "" rather than failing: a dtype we cannot name must
not make a trace unreadable.
"""

from __future__ import annotations

from functools import lru_cache

_C10 = {
    "float": "float32",
    "double": "float64",
    "long double": "float64",
    "c10::Half": "float16",
    "Half": "float16",
    "at::Half": "float16",
    "c10::half": "float16",
    "c10::BFloat16": "bfloat16",
    "BFloat16": "bfloat16",
    "at::BFloat16": "bfloat16",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
    "long": "int64",
    "long int": "int64",
    "long long": "int64",
    "long long int": "int64",
    "int64_t": "int64",
    "int": "int32",
    "int32_t": "int32",
    "short": "int16",
    "short int": "int16",
    "int16_t": "int16",
    "signed char": "int8",
    "char": "int8",
    "int8_t": "int8",
    "unsigned char": "uint8",
    "uint8_t": "uint8",
    "unsigned short": "uint16",
    "unsigned short int": "uint16",
    "uint16_t": "uint16",
    "unsigned int": "uint32",
    "uint32_t": "uint32",
    "unsigned long": "uint64",
    "unsigned long int": "uint64",
    "unsigned long long": "uint64",
    "uint64_t": "uint64",
    "bool": "bool",
    "c10::complex<c10::Half>": "complex32",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::qint8": "qint8",
    "c10::quint8": "quint8",
    "c10::qint32": "qint32",
    "c10::quint4x2": "quint4x2",
    "c10::quint2x4": "quint2x4",
    "c10::bits1x8": "bits1x8",
    "c10::bits2x4": "bits2x4",
    "c10::bits4x2": "bits4x2",
    "c10::bits8": "bits8",
    "c10::bits16": "bits16",
}
# ScalarType enum spellings (c10::toString(ScalarType)) and torch names themselves.
_SCALAR = {
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "Half": "float16",
    "Float": "float32",
    "Double": "float64",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Bool": "bool",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
    "BFloat16": "bfloat16",
    "QUInt4x2": "quint4x2",
    "QUInt2x4": "quint2x4",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
}
_TORCH = {v: v for v in set(_C10.values()) | set(_SCALAR.values())}
DTYPES = {**_TORCH, **_SCALAR, **_C10}


@lru_cache(maxsize=4096)
def dtype_of(type_str: str) -> str:
    """Torch dtype name for an ET type string "Tensor(<c10 name>)"; "" when unknown."""
    inner = type_str
    if inner.startswith("Tensor(") and inner.endswith(")"):
        inner = inner[7:-1]
    inner = inner.strip()
    if inner.startswith("torch."):
        inner = inner[6:]
    return DTYPES.get(inner, "")


def split_top_level(text: str, opening: str = "([{<", closing: str = ")]}>") -> list[str]:
    """Parts of `text` between top-level commas, stripped (brackets in `opening`/`closing` nest).
    The one splitter for ET type lists and operator schema argument lists."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur and "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


@lru_cache(maxsize=4096)
def split_list_type(type_str: str) -> tuple[str, ...]:
    """Element types of "GenericList[Tensor(float),Tensor(float)]" (top-level commas only)."""
    start = type_str.find("[")
    if start < 0 or not type_str.endswith("]"):
        return ()
    return tuple(split_top_level(type_str[start + 1 : -1], "([<", ")]>"))


_BITS = {"bool": 8, "uint8": 8, "int8": 8, "qint8": 8, "quint8": 8, "float4_e2m1fn_x2": 8}


@lru_cache(maxsize=256)
def itemsize_of(dtype: str) -> int:
    """Bytes per element of a torch dtype name ("float32" -> 4, "float8_e4m3fn" -> 1)."""
    if dtype in _BITS:
        return _BITS[dtype] // 8
    digits = "".join(c for c in dtype.split("_")[0] if c.isdigit())
    return max(int(digits) // 8, 1) if digits else 4
