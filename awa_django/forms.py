"""The Queue admin form: the capacity rules of ``awa_django.concurrency.validation`` as form errors.

The worker refuses a configuration that breaks these rules (and keeps its last good one); the
form refuses it first, with the same functions and so the same messages, naming the numbers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms

from awa_django import durations
from awa_django.concurrency import QueueLimits, collect_capacity_errors, collect_queue_errors
from awa_django.defaults import MAX_WORKERS_DEFAULT, MIN_WORKERS_DEFAULT, RATE_BURST_DEFAULT, WEIGHT_DEFAULT
from awa_django.exceptions import (
    ConfigurationError,
    InvalidRateLimitError,
    InvalidWeightError,
    InvalidWorkersError,
    MinWorkersExceedGlobalError,
)
from awa_django.models import Queue
from awa_django.services.cluster import global_maximums, live_workers

LIMIT_FIELDS = ("max_workers", "min_workers", "weight", "rate_limit", "rate_burst")


class HumanDurationField(forms.DurationField):
    """A duration typed as ``600``, ``10m``, ``1h30m`` or ``00:10:00``, shown back as ``10m``."""

    default_error_messages = {"invalid": "Enter a duration such as 600 (seconds), 10m, 1h30m or 00:10:00."}

    def prepare_value(self, value: Any) -> Any:
        return durations.describe(value) if isinstance(value, timedelta) else value

    def to_python(self, value: Any) -> timedelta | None:
        if value in self.empty_values:
            return None
        if isinstance(value, timedelta):
            return value
        try:
            parsed = durations.parse(str(value))
        except OverflowError:
            parsed = None
        if parsed is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return parsed


def _field_of(error: ConfigurationError) -> str | None:
    if isinstance(error, InvalidWorkersError):
        return error.field
    if isinstance(error, InvalidWeightError):
        return "weight"
    if isinstance(error, InvalidRateLimitError):
        return "rate_limit"
    if isinstance(error, MinWorkersExceedGlobalError):
        return "min_workers"
    return None


class QueueForm(forms.ModelForm):  # type: ignore[type-arg]
    # Plain integer fields: the rules below give the messages (a bare min_value would say
    # "greater than or equal to 0" without naming the rule or the queue).
    max_workers = forms.IntegerField(
        initial=MAX_WORKERS_DEFAULT,
        help_text="Hard-reserved mode: jobs of this queue one worker runs at once (at least 1).",
    )
    min_workers = forms.IntegerField(
        initial=MIN_WORKERS_DEFAULT,
        help_text="Weighted mode: slots guaranteed to this queue in every worker (0 or more; the sum over "
        "all queues may not exceed the global maximum).",
    )
    weight = forms.IntegerField(
        initial=WEIGHT_DEFAULT, help_text="Weighted mode: share of the overflow pool (at least 1)."
    )
    rate_burst = forms.IntegerField(
        initial=RATE_BURST_DEFAULT, help_text="Token-bucket burst (0 or more); 0 means ceil(rate_limit)."
    )
    deadline = HumanDurationField(
        required=False,
        help_text=f"A running job of this queue is rescued after this long; empty = none. {durations.HELP}",
    )
    priority_aging = HumanDurationField(
        required=False,
        help_text=f"An available job waiting this long moves up one priority level; empty = never. {durations.HELP}",
    )

    class Meta:
        model = Queue
        fields = (
            "name",
            "paused",
            "max_workers",
            "min_workers",
            "weight",
            "rate_limit",
            "rate_burst",
            "deadline",
            "priority_aging",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("deadline", "priority_aging"):
            value = data.get(name)
            if isinstance(value, timedelta) and value <= timedelta(0):
                self.add_error(name, f"{name} {value} is invalid; use a positive duration, or leave it empty for none")
        if any(name not in data for name in LIMIT_FIELDS):
            return data  # a field failed to parse; its own error says why
        queue_name = data.get("name") or self.instance.name or "(new queue)"
        limits = QueueLimits(**{name: data[name] for name in LIMIT_FIELDS})
        own_errors = collect_queue_errors(queue_name, limits)
        for error in own_errors:
            self.add_error(_field_of(error), str(error))
        if own_errors:
            return data
        self._check_sum_of_min_workers(queue_name, limits)
        return data

    def _check_sum_of_min_workers(self, queue_name: str, limits: QueueLimits) -> None:
        """Σ min_workers ≤ every global maximum in force: the setting, and each live worker's."""
        maximums = global_maximums(live_workers())
        if not maximums:
            return
        others = Queue.objects.exclude(pk=self.instance.pk) if self.instance.pk else Queue.objects.all()
        queues: dict[str, QueueLimits] = {
            row["name"]: QueueLimits(**{name: row[name] for name in LIMIT_FIELDS})
            for row in others.values("name", *LIMIT_FIELDS)
        }
        queues[queue_name] = limits
        others_sum = sum(q.min_workers for name, q in queues.items() if name != queue_name)
        for maximum, source in maximums:
            for error in collect_capacity_errors(maximum, queues):
                if isinstance(error, MinWorkersExceedGlobalError):
                    self.add_error(
                        "min_workers",
                        f"{error}. {maximum} is set by {source}; the other queues' "
                        f"min_workers add up to {others_sum}, so this queue may have at most "
                        f"{max(maximum - others_sum, 0)}.",
                    )
