"""Plotly figures for the UI: pure functions from engine tables to `plotly.graph_objects.Figure`.

plotly is imported only inside this package (and lazily inside the builders), so the replay and
capture paths never need it. Modules: graph (layered operator DAG), timeline (µs-exact lanes),
breakdown (time tables and bars), compare (original vs replay), selection (UI events -> ids).
"""
