"""Concurrent revocations of one key: row locks make exactly one of them win (real commits)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from access.models import ApiKey
from access.services import key_mint, key_revoke
from core.exceptions import ConflictError
from core.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_concurrent_revocations_make_one_revocation(tx_world, monkeypatch):
    from access import tasks

    monkeypatch.setattr(tasks.withdraw_key_task, "delay", lambda *args: None)  # no broker here
    monkeypatch.setattr(tasks.publish_key_task, "delay", lambda *args: None)
    outcomes = []
    for round_ in range(5):
        key, _ = key_mint(user=tx_world.users["member"], tenant=tx_world.alpha, name=f"race-{round_}")
        barrier = threading.Barrier(2)

        def revoke(role, key_id=key.pk, barrier=barrier):
            barrier.wait()
            try:
                key_revoke(user=tx_world.users[role], key_id=key_id)
                return "revoked"
            except ConflictError:
                return "conflict"
            finally:
                connection.close()

        with ThreadPoolExecutor(2) as pool:
            outcomes.append(sorted(pool.map(revoke, ["member", "tenant_admin"])))
        assert AuditEvent.objects.filter(action="apikey.revoke", object_id=str(key.pk)).count() == 1
    assert outcomes == [["conflict", "revoked"]] * 5
    assert not ApiKey.objects.filter(revoked_at__isnull=True).exists()
