"""mystique-studio engine: trace ingestion, graph, capture, replay, composition, comparison.

The engine never imports streamlit. Ingestion, graph, capture, replay and composition import and
run with only torch, pandas and networkx installed (tests/test_minimal_install.py): orjson,
msgspec, pyarrow (the parse cache) and psutil make them faster or richer when present, and
plotly is imported only by `engine.figures`.
"""

from engine.errors import TraceError

__all__ = ["TraceError"]
__version__ = "0.1.0"
