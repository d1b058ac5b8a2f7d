"""The Celery app: web, worker and beat share settings; tasks are discovered per app."""

import os
import time

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# DjangoTask adds delay_on_commit(): enqueue only once the transaction that decided it commits.
app = Celery("portal", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
def _task_started(task_id=None, task=None, **_):
    _started[task_id] = time.perf_counter()


@signals.task_postrun.connect
def _task_finished(task_id=None, task=None, state=None, **_):
    from core.observability import TASK_SECONDS

    started = _started.pop(task_id, None)
    if started is not None and task is not None:
        TASK_SECONDS.labels(task.name, state or "UNKNOWN").observe(time.perf_counter() - started)


_started: dict[str, float] = {}
