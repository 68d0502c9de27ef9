"""A signup view that enqueues a job in its transaction: the subject of the testing guide's example."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from testproject.demo.jobs import send_welcome


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    email = request.POST.get("email", "").strip()
    if not email:
        return JsonResponse({"error": "email is required"}, status=400)
    with transaction.atomic():  # the user and the job commit together, or neither does
        user = get_user_model().objects.create_user(username=email, email=email)
        send_welcome.enqueue(user_id=user.pk)
    return JsonResponse({"user_id": user.pk}, status=201)
