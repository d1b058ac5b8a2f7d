"""The audit log (core.models): each committed row also goes to the `audit` logger, and rows past
AUDIT_RETENTION_DAYS are deleted by the beat task."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import models as core_models
from core.models import AuditEvent, audit
from core.tasks import purge_audit_task


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def audit_records():
    handler = _Records()
    logger = logging.getLogger("audit")  # propagate=False: pytest's caplog (on root) never sees it
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


class TestAuditLogger:
    def test_a_committed_row_is_logged_once_with_the_row(
        self, world, audit_records, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            event = audit(actor=world.users["member"], action="test.logged", obj=world.alpha, tenant=world.alpha)
        [record] = audit_records
        assert record.levelno == logging.INFO and record.getMessage() == f"test.logged quotas.tenant:{world.alpha.pk}"
        assert record.audit == event.as_record() and record.audit["actor"] == "alpha-member"

    def test_a_row_that_rolls_back_is_never_logged(self, world, audit_records, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            with pytest.raises(RuntimeError), transaction.atomic():
                audit(actor=None, action="test.rolled_back", obj=world.alpha)
                raise RuntimeError
        assert audit_records == [] and not AuditEvent.objects.filter(action="test.rolled_back").exists()


def _aged(world, days: float) -> AuditEvent:
    event = audit(actor=None, action="test.aged", obj=world.alpha)
    AuditEvent.objects.filter(pk=event.pk).update(created=timezone.now() - timedelta(days=days))
    return event


class TestRetention:
    def test_rows_past_the_retention_go_and_the_purge_is_audited(self, world, settings):
        settings.AUDIT_RETENTION_DAYS = 30
        old, kept = _aged(world, 31), _aged(world, 29)
        assert purge_audit_task() == 1
        assert set(AuditEvent.objects.filter(action="test.aged").values_list("pk", flat=True)) == {kept.pk}
        purge = AuditEvent.objects.get(action="audit.purge")
        assert (purge.actor_name, purge.changes["deleted"]) == ("system", 1)
        assert not AuditEvent.objects.filter(pk=old.pk).exists()
        assert purge_audit_task() == 0 and AuditEvent.objects.filter(action="audit.purge").count() == 1

    def test_zero_keeps_everything(self, world, settings):
        settings.AUDIT_RETENTION_DAYS = 0
        _aged(world, 10_000)
        assert purge_audit_task() == 0 and AuditEvent.objects.filter(action="test.aged").count() == 1

    def test_many_rows_go_in_batches(self, world, settings, monkeypatch):
        monkeypatch.setattr(core_models, "PURGE_BATCH", 2)
        settings.AUDIT_RETENTION_DAYS = 1
        for _ in range(5):
            _aged(world, 2)
        assert purge_audit_task() == 5 and not AuditEvent.objects.filter(action="test.aged").exists()

    def test_beat_runs_it(self):
        entry = settings.CELERY_BEAT_SCHEDULE["audit-purge"]
        assert entry["task"] == purge_audit_task.name and entry["schedule"] <= 86400
