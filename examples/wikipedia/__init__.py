"""The demo: Wikipedia-edit-like events, user profiles from change capture, windowed page counts."""
