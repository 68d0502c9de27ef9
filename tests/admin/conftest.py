"""Users for the permission matrix, and helpers for the admin tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client


def _staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password=None, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="awa", codename__in=codenames))
    return user


@pytest.fixture
def users(db: None) -> dict[str, User | None]:
    """superuser, change-permission staff, view-only staff, non-staff, anonymous (None)."""
    return {
        "superuser": User.objects.create_superuser("root", password=None),
        "change_staff": _staff(
            "changer",
            "view_queue",
            "change_queue",
            "view_job",
            "change_job",
            "delete_job",
            "view_workerinstance",
            "change_workerinstance",
        ),
        "view_staff": _staff("viewer", "view_queue", "view_job", "view_workerinstance"),
        "non_staff": User.objects.create_user("plain", password=None),
        "anonymous": None,
    }


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []
