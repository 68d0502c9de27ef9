from __future__ import annotations

from django.apps import AppConfig


class AwaConfig(AppConfig):
    name = "awa_django"
    label = "awa"
    verbose_name = "Awa job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from awa_django import checks  # noqa: F401  (registers the system checks)
        from awa_django.registry import registry

        registry.autodiscover()
