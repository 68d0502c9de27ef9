"""The Queue, FairKey and ClusterSettings admin forms: the capacity rules of
``awa_django.concurrency.validation`` and the fair key rules as form errors.

The worker refuses a configuration that breaks these rules (and keeps its last good one); the
form refuses it first, with the same functions and so the same messages, naming the numbers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.core import validators

from awa_django import durations
from awa_django.concurrency import (
    QueueLimits,
    check_global_max_workers,
    collect_capacity_errors,
    collect_queue_errors,
)
from awa_django.conf import awa_settings
from awa_django.defaults import (
    KEY_WEIGHT_DEFAULT,
    MAX_WORKERS_DEFAULT,
    MIN_WORKERS_DEFAULT,
    QUEUE_DURATION_MAX,
    RATE_BURST_DEFAULT,
    WEIGHT_DEFAULT,
)
from awa_django.exceptions import (
    ConfigurationError,
    InvalidRateLimitError,
    InvalidWeightError,
    InvalidWorkersError,
    MinWorkersExceedGlobalError,
)
from awa_django.jobspec import check_name, fair_key_problem
from awa_django.models import ClusterSettings, FairKey, Queue
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


def name_integer_limits(form: forms.BaseForm) -> None:
    """Every integer field's range errors name the field and the value typed, as the form's own
    rules do (Django's say only "Ensure this value is less than or equal to 2147483647")."""
    for name, field in form.fields.items():
        if isinstance(field, forms.IntegerField):
            field.error_messages["max_value"] = f"{name} %(value)s is too large; use at most %(limit_value)s"
            field.error_messages["min_value"] = f"{name} %(value)s is too small; use at least %(limit_value)s"


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
    key_weight = forms.IntegerField(
        required=False,
        initial=KEY_WEIGHT_DEFAULT,
        help_text="Fair keys: each key's share of this queue's slots, unless a fair key override says "
        f"(at least 1; empty = {KEY_WEIGHT_DEFAULT}).",
    )
    key_max_running = forms.IntegerField(
        required=False,
        help_text="Fair keys: at most this many jobs of one key run at once, across every worker, unless a "
        "fair key override says (at least 1; empty = unlimited).",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name_integer_limits(self)

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
            "key_weight",
            "key_max_running",
        )

    def clean_name(self) -> str:
        """A name enqueue and ``awa_worker -q`` accept (check_name): a queue named with a control
        character could never receive a job."""
        value = self.cleaned_data.get("name")
        try:
            return check_name("name", value, None)
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="name") from None

    def clean_key_weight(self) -> int:
        value = self.cleaned_data.get("key_weight")
        if value is None:
            return KEY_WEIGHT_DEFAULT
        if value < 1:
            raise forms.ValidationError(
                f"key_weight {value} is invalid; each key's weight must be an integer of at least 1 "
                f"(empty = {KEY_WEIGHT_DEFAULT})",
                code="key_weight",
            )
        return int(value)

    def clean_key_max_running(self) -> int | None:
        return clean_cap(self.cleaned_data.get("key_max_running"), "key_max_running", "unlimited")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("deadline", "priority_aging"):
            value = data.get(name)
            if isinstance(value, timedelta) and value <= timedelta(0):
                self.add_error(name, f"{name} {value} is invalid; use a positive duration, or leave it empty for none")
            elif isinstance(value, timedelta) and value.total_seconds() > QUEUE_DURATION_MAX:
                self.add_error(
                    name,
                    f"{name} {value} is invalid; use at most {QUEUE_DURATION_MAX / 86400:.0f} days, "
                    "or leave it empty for none",
                )
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


class ClusterSettingsForm(forms.ModelForm):  # type: ignore[type-arg]
    """The cluster's one global maximum, held to the rules of AWA['GLOBAL_MAX_WORKERS']: at least
    1 (0 would cap every worker in cluster scope at no job), and at least the queues' Σ min_workers."""

    class Meta:
        model = ClusterSettings
        fields = ("global_max_workers",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name_integer_limits(self)

    def clean_global_max_workers(self) -> int | None:
        value = self.cleaned_data.get("global_max_workers")
        if value is None:
            return None
        queues = {
            row["name"]: QueueLimits(**{name: row[name] for name in LIMIT_FIELDS})
            for row in Queue.objects.values("name", *LIMIT_FIELDS)
        }
        own = check_global_max_workers(value)
        if own is not None:
            raise forms.ValidationError(str(own), code="global_max_workers")
        for error in collect_capacity_errors(value, queues):
            if isinstance(error, MinWorkersExceedGlobalError):  # a queue's own error is its form's to say
                raise forms.ValidationError(str(error), code="global_max_workers")
        return int(value)


def clean_cap(value: int | None, field: str, empty: str) -> int | None:
    """A per-key cap: None (``empty``) or at least 1; ValidationError naming the value otherwise."""
    if value is not None and value < 1:
        raise forms.ValidationError(
            f"{field} {value} is invalid; a key's cap must be an integer of at least 1, or empty for {empty} "
            "(to stop a key, pause its queue or cancel its jobs: a cap of 0 would hold them forever)",
            code=field,
        )
    return value


def cap_above_slots(cap: int | None, queue: str) -> str | None:
    """In hard-reserved mode, a key cap above the queue's ``max_workers`` binds only when several
    workers serve the queue (one worker never runs more than max_workers of its jobs): say so."""
    if cap is None or awa_settings().GLOBAL_MAX_WORKERS is not None:
        return None
    max_workers = Queue.objects.filter(name=queue).values_list("max_workers", flat=True).first()
    max_workers = MAX_WORKERS_DEFAULT if max_workers is None else max_workers
    if cap <= max_workers:
        return None
    return (
        f"the cap {cap} is above the max_workers ({max_workers}) of queue {queue!r} in hard-reserved mode: one worker "
        f"never runs more than {max_workers} of the queue's jobs, so the cap binds only when several workers "
        "serve the queue (system check awa.W007)"
    )


class FairKeyField(forms.CharField):
    """A fair key typed as it is stored: not stripped, empty allowed (the default key), and
    checked by the enqueue rule (``fair_key_problem``), whose message names the value."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(strip=False, required=False, empty_value="")
        kwargs.pop("max_length", None)  # the enqueue rule's message names the length and the limit
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, validators.ProhibitNullCharactersValidator)]

    def validate(self, value: Any) -> None:
        super().validate(value)
        problem = fair_key_problem(value)
        if problem is not None:
            raise forms.ValidationError(f"key {value!r}: {problem}", code="fair_key")


class FairKeyForm(forms.ModelForm):  # type: ignore[type-arg]
    """One key's overrides inside a queue; empty weight or cap = the queue's ``key_weight`` /
    ``key_max_running``."""

    key = FairKeyField(help_text="The jobs' fair_key, exactly (e.g. tenant:42); empty = the default key.")
    weight = forms.IntegerField(
        required=False, help_text="This key's share of the queue's slots (at least 1); empty = the queue's key weight."
    )
    max_running = forms.IntegerField(
        required=False,
        help_text="At most this many of this key's jobs run at once, across every worker (at least 1); "
        "empty = the queue's cap.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name_integer_limits(self)

    class Meta:
        model = FairKey
        fields = ("queue", "key", "weight", "max_running")

    def clean_queue(self) -> str:
        value = self.cleaned_data.get("queue")
        try:
            return check_name("queue", value, None)
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="queue") from None

    def clean_weight(self) -> int | None:
        value = self.cleaned_data.get("weight")
        if value is not None and value < 1:
            raise forms.ValidationError(
                f"weight {value} is invalid; a key's weight must be an integer of at least 1, or empty for the "
                "queue's key weight",
                code="weight",
            )
        return value

    def clean_max_running(self) -> int | None:
        return clean_cap(self.cleaned_data.get("max_running"), "max_running", "the queue's cap")
