"""Durable jobs: the guide's example (docs/guide/durable-jobs.md), kept verbatim (test_docs checks)."""

import pytest

from awa_django import JobContext, WaitTimeout, job
from awa_django.models import Job
from awa_django.testing import run_jobs

charged: list[int] = []  # stands in for a payment provider: the orders it charged


def charge_card(order_id: int, amount: int) -> dict:
    charged.append(order_id)
    return {"charge_id": f"ch_{order_id}", "amount": amount}


def refund(charge_id: str) -> str:
    return f"refunded {charge_id}"


@job("orders.fulfil", takes_context=True)
def fulfil(context: JobContext, order_id: int, amount: int) -> dict:
    charge = context.step("charge", charge_card, order_id, amount)  # runs once per job, ever
    try:
        approval = context.wait_for("approved", timeout=24 * 3600)  # parks: holds no slot meanwhile
    except WaitTimeout:
        return {"order": order_id, "refund": context.step("refund", refund, charge["charge_id"])}
    label = context.step("ship", lambda: f"label-{order_id}-{approval['by']}")
    return {"order": order_id, "charge": charge["charge_id"], "label": label}


@pytest.mark.django_db
def test_an_order_is_charged_once_waits_for_its_approval_then_ships():
    order = Job.objects.enqueue("orders.fulfil", {"order_id": 7, "amount": 1200})
    run_jobs()  # charges the card, then parks until "approved" comes (or its timeout, a day on)
    assert Job.objects.get(pk=order.id).state == "scheduled"  # "waiting" for a wait with no timeout

    Job.objects.signal(order.id, "approved", {"by": "ana"})  # from the approval view, say
    run_jobs()  # runs from the top: "charge" returns its stored result, the wait its payload

    assert charged == [7]
    assert Job.objects.get(pk=order.id).result == {"order": 7, "charge": "ch_7", "label": "label-7-ana"}
