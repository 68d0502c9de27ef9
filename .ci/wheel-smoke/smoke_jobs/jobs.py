"""The wheel smoke's one job (autodiscovered, like admin.py)."""

from __future__ import annotations

from awa_django import job


@job("smoke.hello", queue="smoke")
def hello(name: str) -> None:
    print(f"hello, {name}", flush=True)
