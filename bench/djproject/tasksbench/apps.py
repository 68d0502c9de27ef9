from django.apps import AppConfig


class TasksBenchConfig(AppConfig):
    name = "bench.djproject.tasksbench"
    label = "tasksbench"
