"""The admin, one module per admin: Job (``jobs``), Queue with its dashboard (``queues``,
``dashboard``, ``charts``), Schedule (``schedules``), fair key overrides (``fairkeys``), Workflow
(``workflows``), the cluster view (``cluster``) and the workers with their controls (``workers``); their
list filters in ``filters``, what they share in ``helpers``.

Each module registers its admins with ``@admin.register``; Django's autodiscovery imports this
package, and the imports below are what load them. Every action calls the service functions in
``awa_django.services`` (the same ones your code can call).
"""

from awa_django.admin.cluster import ClusterSettingsAdmin, WorkerCapacityAdmin
from awa_django.admin.fairkeys import FairKeyAdmin
from awa_django.admin.jobs import JobAdmin
from awa_django.admin.queues import QueueAdmin
from awa_django.admin.schedules import ScheduleAdmin
from awa_django.admin.workers import WorkerInstanceAdmin
from awa_django.admin.workflows import WorkflowAdmin

__all__ = [
    "ClusterSettingsAdmin",
    "FairKeyAdmin",
    "JobAdmin",
    "QueueAdmin",
    "ScheduleAdmin",
    "WorkerCapacityAdmin",
    "WorkerInstanceAdmin",
    "WorkflowAdmin",
]
