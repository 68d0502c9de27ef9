"""Django's PostgreSQL backend, on the embedded server: it is started when a connection is needed.

``testproject.settings`` uses this ENGINE when DATABASE_URL is unset, so importing the settings
(``manage.py help``, ``check``, mypy's django-stubs plugin) starts nothing.
"""
