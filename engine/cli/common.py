"""Helpers shared by CLI subcommands: JSON output and a progress bar bound to engine callbacks."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from engine import jsonio
from engine.progress import Progress


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
    bar = tqdm(
        total=1000, desc=desc, file=sys.stderr, leave=False, bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}"
    )

    def cb(fraction: float, message: str) -> None:
        bar.n = int(fraction * 1000)
        bar.set_postfix_str(message[:60], refresh=True)

    try:
        yield cb
    finally:
        bar.close()
