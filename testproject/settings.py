"""Settings for testproject: the demo and test harness of awa_django.

DATABASE_URL chooses the database (any PostgreSQL); when it is unset an embedded
PostgreSQL is started when the first connection is opened, not when this module is imported
(see testproject/embedded.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

SECRET_KEY = env("DJANGO_SECRET_KEY", default="testproject-insecure-key-not-for-production")
DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "awa_django",
    "testproject.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None

if os.environ.get("DATABASE_URL"):
    _url = os.environ["DATABASE_URL"]
    if not _url.startswith(("postgres://", "postgresql://", "pgsql://")) or any(c.isspace() for c in _url):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"DATABASE_URL={_url!r} is not one PostgreSQL URL; set it to "
            "postgresql://USER:PASSWORD@HOST:PORT/NAME, or unset it to use the embedded server"
        )
    DATABASES = {"default": env.db("DATABASE_URL")}
else:
    from testproject.embedded import database_settings

    DATABASES = {"default": database_settings()}

# AWA_DB_NAME points a process at another database of the same server (the tests start worker
# subprocesses on their test database this way).
if os.environ.get("AWA_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["AWA_DB_NAME"]

# Several test runs may share one server (e.g. parallel checkouts): AWA_TEST_DB names the test database.
DATABASES["default"].setdefault("TEST", {})["NAME"] = env("AWA_TEST_DB", default="test_awa")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# awa.W011 (atomic handlers on a database with CONN_MAX_AGE 0): the demo's atomic kinds
# (count_atomic, noop_atomic, touch_atomic, look_atomic) are run by the tests and benches that need
# them, which set the connection lifetime they measure; the demo keeps Django's default of 0.
SILENCED_SYSTEM_CHECKS = ["awa.W011"]

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# The demo's emails (send_welcome) are printed by the worker, not sent: there is no mail server
# here. Django 6.1 configures mail with MAILERS (and warns when it is missing); before, EMAIL_BACKEND.
# The test runner swaps either for its in-memory outbox.
_CONSOLE_MAIL = "django.core.mail.backends.console.EmailBackend"
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": _CONSOLE_MAIL}}
else:
    EMAIL_BACKEND = _CONSOLE_MAIL

AWA: dict[str, object] = {}

# Django's Tasks framework (django.tasks on Django 6, the django-tasks backport before): every
# @task is an awa_django job that awa_worker runs. testproject.demo.tasks has an example.
TASKS = {
    "default": {
        "BACKEND": "awa_django.backends.AwaBackend",
        "QUEUES": ["default"],
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"awa_django": {"handlers": ["console"], "level": env("AWA_LOG_LEVEL", default="INFO")}},
}
