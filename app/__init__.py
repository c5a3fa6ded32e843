"""The Streamlit UI: `app/main.py` routes to the pages in `pages/`; `app.state` holds caches."""
