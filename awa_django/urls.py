"""awa_django's URLs: ``path("awa/", include("awa_django.urls"))`` serves ``/awa/metrics``."""

from django.urls import path

from awa_django.observability import views

app_name = "awa"
urlpatterns = [path("metrics", views.metrics, name="metrics")]
