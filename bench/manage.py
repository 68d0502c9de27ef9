#!/usr/bin/env python
"""manage.py for the bench Django projects: awa_django by default, or
DJANGO_SETTINGS_MODULE=bench.djproject.settings_tasks for django-tasks-db.

Run from the repository root (or with it on PYTHONPATH), e.g.
    DATABASE_URL=postgresql://... python bench/manage.py awa_worker -q bench
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.djproject.settings_awa")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
