"""Text from a trace (names, paths, messages) shown as plain text in Streamlit's Markdown.

Why: `st.markdown`, `caption`, `success`, `error`... render Markdown, so a ProfilerStep named
`![x](http://host/t.png)` would make the browser fetch that URL. `md(text)` backslash-escapes every
character Markdown, Streamlit's emoji shortcodes (`:x:`) and LaTeX (`$`) give meaning to."""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$&])")


def md(text: object) -> str:
    """`text` with every Markdown-special character escaped (shown literally)."""
    return _SPECIAL.sub(r"\\\1", str(text))
