"""The Celery app: web, worker and beat share settings; tasks are discovered per app."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# DjangoTask adds delay_on_commit(): enqueue only once the transaction that decided it commits.
app = Celery("portal", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
