from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("demo/", include("testproject.demo.urls")),
    path("awa/", include("awa_django.urls")),
]
