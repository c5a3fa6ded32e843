"""Streamlit router (placeholder until the dashboard lands): lists the bundled samples."""
from pathlib import Path

import streamlit as st

st.title("mystique-studio")
samples = sorted(Path(__file__).resolve().parents[1].joinpath("sample_traces").glob("*"))
st.write([p.name for p in samples])
