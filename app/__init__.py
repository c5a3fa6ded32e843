"""The Streamlit UI: `app/main.py` routes to the pages in `pages/`; `app.session` holds the session's
state, `app.views` the cached engine views, `app.widgets` the shared widgets."""
