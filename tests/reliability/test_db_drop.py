"""PostgreSQL drops the web request's connection mid-transaction (pg_terminate_backend from
another connection): the client gets a clean 5xx, and nothing is half-written — no deployment
without its Requested event and audit entry, no event or reservation without its deployment."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from core.models import AuditEvent
from deployments import services
from deployments.models import DeploymentEvent, ModelDeployment
from quotas.models import QuotaReservation, TenantQuota
from tests.e2e.workers import purge_broker
from tests.reliability.conftest import Api, deployment_pair_violations, draft, quota_violations
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _connect(*, autocommit: bool) -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        dbname=db["NAME"],
        password=db.get("PASSWORD") or None,
        autocommit=autocommit,
    )


def _terminate_request_waiting_on(table: str) -> int:
    """Find the backend blocked on our row lock (it is inside the request's transaction) and
    terminate it; returns its pid. Autocommit: inside a transaction pg_stat_activity is a
    snapshot taken once and would never show the request arriving."""
    observer = _connect(autocommit=True)

    def blocked():
        with observer.cursor() as cur:
            cur.execute(
                # Not "…FOR UPDATE": pg_stat_activity keeps only the first 1 KB of a query, and the
                # locking SELECT (quota joined with tenant and flavor) is longer than that.
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE %s",
                (f"%{table}%",),
            )
            row = cur.fetchone()
            return row[0] if row else None

    with observer:
        pid = wait_for(blocked, timeout=20, interval=0.05, what="the request to block on the quota row")
        with observer.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return pid


@pytest.fixture(autouse=True)
def _empty_broker():
    purge_broker()
    yield
    purge_broker()


class TestConnectionDroppedMidRequest:
    @pytest.mark.parametrize("operation", ["create-auto-approved", "approve"])
    def test_it_answers_5xx_and_leaves_no_half_written_deployment(self, tx_world, live_server, operation):
        tx_world.alpha.auto_approve_max_gpus = 4  # create → reserve in the same transaction
        tx_world.alpha.save()
        member = Api(live_server.url, tx_world.users["member"])
        admin = Api(live_server.url, tx_world.users["platform_admin"])
        pending = None
        if operation == "approve":
            tx_world.alpha.auto_approve_max_gpus = 0
            tx_world.alpha.save()
            pending = services.deployment_create(
                tenant=tx_world.alpha, user=tx_world.users["member"], data={**draft("waiting"), "flavor": tx_world.h100}
            )
        quota = TenantQuota.objects.get(tenant=tx_world.alpha, flavor=tx_world.h100)
        before = (ModelDeployment.objects.count(), DeploymentEvent.objects.count(), AuditEvent.objects.count())

        holder = _connect(autocommit=False)
        with holder.cursor() as cur:  # the request will write its rows, then wait for this lock
            cur.execute("SELECT id FROM quotas_tenantquota WHERE id = %s FOR UPDATE", (quota.pk,))
        answer: dict = {}

        def call():
            if pending is None:
                answer["r"] = member.post("/api/v1/deployments/", draft("dropped"))
            else:
                answer["r"] = admin.post(f"/api/v1/deployments/{pending.pk}/approve/", {"reason": "x", "revision": 1})

        thread = threading.Thread(target=call)
        thread.start()
        try:
            _terminate_request_waiting_on("quotas_tenantquota")
        finally:
            holder.rollback()
            holder.close()
            thread.join(30)
        response = answer["r"]
        assert response.status_code == 500, response.text[:300]
        assert "Traceback" not in response.text  # DEBUG off: a plain error page, no internals

        after = (ModelDeployment.objects.count(), DeploymentEvent.objects.count(), AuditEvent.objects.count())
        assert after == before  # the whole transaction rolled back
        assert not ModelDeployment.objects.filter(name="dropped").exists()
        if pending is not None:
            pending.refresh_from_db()
            assert pending.state == "pending_approval" and pending.reserved_gpus == 0
            assert not pending.events.filter(reason="Approved").exists()
        assert not QuotaReservation.objects.exists()
        assert deployment_pair_violations() == [] and quota_violations() == []

        # The server recovered: the next request gets a fresh connection and succeeds.
        retry = (
            member.post("/api/v1/deployments/", draft("dropped"))
            if pending is None
            else admin.post(f"/api/v1/deployments/{pending.pk}/approve/", {"reason": "x", "revision": 1})
        )
        assert retry.status_code == (201 if pending is None else 200), retry.text[:300]  # created / approved
        assert deployment_pair_violations() == [] and quota_violations() == []
