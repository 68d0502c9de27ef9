from django.apps import AppConfig


class AwaBenchConfig(AppConfig):
    name = "bench.djproject.awabench"
    label = "awabench"
