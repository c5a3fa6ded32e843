"""What a Markdown element shows, for tests that read Streamlit's element values.

The dashboard escapes trace text before Streamlit renders it as Markdown (app/markup.py), so an
element's value holds `broken\\_trace\\.json\\.gz` where the page shows `broken_trace.json.gz`.
`shown` applies CommonMark's rule (a backslash before an ASCII punctuation character is dropped
and the character is literal); `markdown_links` finds link and image syntax that a CommonMark +
GFM renderer would turn into a link or an image (inline, reference, autolink, GFM literal URL),
ignoring escaped characters. Both follow the CommonMark spec, not the dashboard's helper.
"""

from __future__ import annotations

import re

_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_LINKS = re.compile(
    r"!\[|\]\(|\]\[|\]:|<[A-Za-z][A-Za-z0-9+.-]{1,31}:|\b(?:https?|ftp)://|\bwww\.|[\w.+-]@[\w-]+\.\w",
    re.IGNORECASE,
)


def shown(text: str) -> str:
    """The characters a Markdown element displays for `text` (escapes removed)."""
    return _ESCAPED.sub(r"\1", str(text))


def markdown_links(text: str) -> list[str]:
    """Unescaped link or image syntax in `text` (escaped characters cannot take part)."""
    return [m.group(0) for m in _LINKS.finditer(_ESCAPED.sub("\x00", str(text)))]
