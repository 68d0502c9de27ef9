"""awa_django's side-by-side benchmark harness: see bench/README.md (`python bench/run.py`)."""
