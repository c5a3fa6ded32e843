"""The workspace: what a user loaded, composed and ran, kept on disk so nothing is lost.

A workspace is a folder (default `.mystique/` in the working directory, `MYSTIQUE_WORKSPACE`
or an explicit path) holding `catalog.sqlite` (an embedded SQLite catalog: traces, specs,
replay jobs, settings) and the files the runs write (`runs/<job id>/`). The dashboard restores
its session from it after a browser reload or a server restart; replay jobs run in worker
processes (`engine.workspace.jobs`) that write their progress into the catalog, so a page can
go away while they run. Pure Python (sqlite3), no streamlit.
"""

from engine.workspace.catalog import Catalog, CatalogError, JobStatus, default_workspace
from engine.workspace.jobs import JobRunner

__all__ = ["Catalog", "CatalogError", "JobRunner", "JobStatus", "default_workspace"]
