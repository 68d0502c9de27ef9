from django.urls import path

from testproject.demo import views

urlpatterns = [
    path("signup/", views.signup, name="signup"),
]
