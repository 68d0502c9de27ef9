"""Who may read the admin's live JSON views (the dashboard's, the queue list's, Running now's):
staff with the admin's view permission, as for the pages; or, like the metrics view
(``awa_django.observability.views``), a request with ``Authorization: Bearer <AWA['METRICS_TOKEN']>``;
or anyone when ``AWA['METRICS_OPEN']`` opens them on purpose. Closed is the default.

``live_json(site, guarded, data)``: ``data`` answers a token (or open) request directly, without
the admin's login; every other request goes through ``site.admin_view(guarded)``, which checks
the permission and then calls ``data``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache

from awa_django.conf import awa_settings

View = Callable[..., HttpResponse]


def opened_by_token(request: HttpRequest) -> bool:
    """The request carries the metrics token, or ``METRICS_OPEN`` opens the live views to anyone."""
    current = awa_settings()
    if current.METRICS_OPEN:
        return True
    token = current.METRICS_TOKEN
    if not token:
        return False
    sent = request.headers.get("Authorization", "")
    return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


def live_json(site: AdminSite, guarded: View, data: View) -> View:
    admin_view = site.admin_view(guarded)

    @never_cache
    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "GET" and opened_by_token(request):
            return data(request, *args, **kwargs)
        return admin_view(request, *args, **kwargs)

    return view
