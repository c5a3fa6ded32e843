"""`md_escape`: trace text shown through Streamlit's Markdown as the characters it holds.

Why: `st.markdown`, `caption`, `success`, `error`, `warning`, `info`, `toast`, progress texts,
expander, tab, button and metric labels all render Markdown (GitHub-flavoured, plus Streamlit's
`:color[...]`, `:material/...:`, emoji shortcodes and `$...$` LaTeX). Trace names, file names,
ProfilerStep and op names are written by whoever made the trace, so a step named
`![x](http://host/t.png)` made the browser fetch that URL when a rank's timeline opened (issue
31). CommonMark lets a backslash escape any ASCII punctuation character, so escaping all of them
leaves no syntax in the text (links, images, emphasis, code, HTML, headings, lists, tables,
Streamlit's directives) while it still reads the same. Newlines become spaces: a label is one
line, and a line break could start a block.

Use it on the trace-derived part of a message only, never on Markdown the page writes itself.
"""

from __future__ import annotations

import re
from typing import Any

_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def md_escape(text: Any) -> str:
    """`str(text)` with every ASCII punctuation character backslash-escaped and line breaks as spaces."""
    return _PUNCT.sub(r"\\\1", _BREAKS.sub(" ", str(text)))
