"""The benchmark's own small Django project (settings for awa_django and for django-tasks-db)."""
