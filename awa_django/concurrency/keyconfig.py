"""Each queue's fair-key settings in force: the queue's defaults with its ``FairKey`` overrides.

``QueueKeySettings`` is what the worker hands to a queue runner's ``KeyShares`` and what the admin
shows as the share in force: the queue's default key weight and cap (``Queue.key_weight``,
``Queue.key_max_running``) and, per key with an override row, its effective ``(weight,
max_running)`` after a NULL column took the queue's default. ``settings_from_rows`` builds them
from ``read_key_settings`` rows and is pure; ``load_key_settings`` runs that statement on Django's
connection (the admin, in-process runs), and the worker runs the same statement on its own pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from awa_django.defaults import DATABASE_ALIAS_DEFAULT, KEY_WEIGHT_DEFAULT


@dataclass(frozen=True)
class QueueKeySettings:
    """One queue's fair-key settings in force.

    ``overrides``: key -> (weight, max_running) for keys with a ``FairKey`` row, NULLs already
    replaced by the queue's defaults; every other key has ``(default_weight,
    default_max_running)``. ``max_running`` None means no cap."""

    default_weight: int = KEY_WEIGHT_DEFAULT
    default_max_running: int | None = None
    overrides: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)

    def weight(self, key: str) -> int:
        return self.overrides[key][0] if key in self.overrides else self.default_weight

    def max_running(self, key: str) -> int | None:
        return self.overrides[key][1] if key in self.overrides else self.default_max_running

    @property
    def capped(self) -> bool:
        """Whether any key of the queue has a cap (every claim of a capped key counts its running)."""
        return self.default_max_running is not None or any(cap is not None for _, cap in self.overrides.values())

    @property
    def keyed(self) -> bool:
        """Whether the settings alone make the queue share its slots by key (a cap, or a key with
        its own weight); otherwise only a job with a non-default key does."""
        return self.capped or any(weight != self.default_weight for weight, _ in self.overrides.values())

    def weights(self) -> dict[str, int]:
        return {key: weight for key, (weight, _) in self.overrides.items()}

    def caps(self) -> dict[str, int | None]:
        return {key: cap for key, (_, cap) in self.overrides.items()}


def settings_from_rows(names: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> dict[str, QueueKeySettings]:
    """``read_key_settings`` rows (by column name: name, key_weight, key_max_running, key, weight,
    max_running) as each named queue's settings; a queue without rows gets the defaults."""
    defaults: dict[str, tuple[int, int | None]] = {}
    overrides: dict[str, dict[str, tuple[int | None, int | None]]] = {}
    for row in rows:
        name, key_weight = row["name"], row["key_weight"]
        defaults[name] = (KEY_WEIGHT_DEFAULT if key_weight is None else int(key_weight), row["key_max_running"])
        if row["key"] is not None:
            overrides.setdefault(name, {})[row["key"]] = (row["weight"], row["max_running"])
    settings: dict[str, QueueKeySettings] = {}
    for name in names:
        default_weight, default_cap = defaults.get(name, (KEY_WEIGHT_DEFAULT, None))
        settings[name] = QueueKeySettings(
            default_weight=default_weight,
            default_max_running=default_cap,
            overrides={
                key: (default_weight if weight is None else int(weight), default_cap if cap is None else int(cap))
                for key, (weight, cap) in overrides.get(name, {}).items()
            },
        )
    return settings


def load_key_settings(
    queue_names: Iterable[str], *, using: str = DATABASE_ALIAS_DEFAULT
) -> dict[str, QueueKeySettings]:
    """Every named queue's fair-key settings in force, in one query on Django's connection ``using``."""
    from django.db import connections  # the only I/O of this module, for callers on Django's side

    from awa_django.sql import statements

    names = list(dict.fromkeys(queue_names))
    with connections[using].cursor() as cursor:
        cursor.execute(statements["read_key_settings"], {"queues": names})
        columns = [column.name for column in cursor.description]
        rows = [dict(zip(columns, values, strict=True)) for values in cursor.fetchall()]
    return settings_from_rows(names, rows)
