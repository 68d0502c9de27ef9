"""The embedded-server backend: Django's PostgreSQL DatabaseWrapper with a lazy HOST."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from testproject import embedded


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        # Every connection (Django's, the test-database creation's, the worker's psycopg pool,
        # which is built from these parameters) passes here first: start the server on demand.
        if not self.settings_dict.get("HOST"):
            self.settings_dict["HOST"] = embedded.socket_dir()
        return super().get_connection_params()
