r"""Helpers shared by CLI subcommands: JSON output, a progress bar bound to engine callbacks, and
the terminal filter every command's output goes through.

Why a filter: a trace's names are whatever its writer put there, and a name holding ESC, BEL
or NUL printed raw drives the terminal (colours, a title, a bell, a hidden line, on some
terminals a query whose answer is typed back: issue 31). `PrintableStream` wraps stdout and
stderr for every command but `app` and writes each C0 control character but newline and tab,
DEL and each C1 control as `\u00XX`: readable, and the same escape JSON uses, so `--json` output
(which orjson already escapes below U+0020) stays valid JSON and decodes to the original names.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator
from typing import Any

from engine import jsonio
from engine.progress import Progress

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every C0 control but newline and tab, DEL and every C1 control as `\\u00XX`."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


class PrintableStream(io.TextIOBase):
    """A text stream that writes `printable(text)` to `raw`; everything else is `raw`'s."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the wrapped stream's
        return self.raw.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


@contextlib.contextmanager
def printable_output() -> Iterator[None]:
    """stdout and stderr through `PrintableStream` while the block runs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(out), PrintableStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def print_json(obj: Any) -> None:
    sys.stdout.write(
        jsonio.dumps(
            obj, option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY | jsonio.OPT_NON_STR_KEYS, default=_default
        ).decode()
        + "\n"
    )


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


@contextlib.contextmanager
def progress_bar(desc: str, enabled: bool = True) -> Iterator[Progress | None]:
    """A tqdm bar on stderr driven by `progress(fraction, message)`; silent when disabled/no tqdm."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield None
        return
    bar = tqdm(  # the bar's own carriage returns go to the terminal itself (its text is printable)
        total=1000,
        desc=desc,
        file=getattr(sys.stderr, "raw", sys.stderr),
        leave=False,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}",
    )

    def cb(fraction: float, message: str) -> None:
        bar.n = int(fraction * 1000)
        bar.set_postfix_str(printable(message[:60]), refresh=True)

    try:
        yield cb
    finally:
        bar.close()
