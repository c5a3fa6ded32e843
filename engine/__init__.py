"""mystique-studio engine: trace ingestion, graph, capture, replay, composition, comparison.

The engine never imports streamlit. Ingestion, capture and replay import with only torch,
pandas, networkx (plus orjson/pyarrow/psutil); plotly is imported only by `engine.figures`.
"""
from engine.errors import TraceError

__all__ = ["TraceError"]
__version__ = "0.1.0"
