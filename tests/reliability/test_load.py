"""Load and races over real HTTP: a live server on PostgreSQL, many `requests` clients in
threads authenticated with real API tokens. The invariants are read back from committed rows:
GPUs admitted == what fits, reserved_gpus == sum of active reservations ≤ nominal + borrowing,
no 5xx, nothing deadlocks (every request answers within its timeout)."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import Group, User

from deployments import services as deployment_services
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from quotas import services as quota_services
from quotas.models import PLATFORM_ADMIN_GROUP, Membership, QuotaReservation, Tenant, TenantQuota
from tests.e2e.workers import purge_broker
from tests.reliability.conftest import (
    Api,
    InvariantWatcher,
    deployment_pair_violations,
    draft,
    knob,
    quota_violations,
    status_histogram,
)

pytestmark = pytest.mark.django_db(transaction=True)


def second_admin() -> User:
    user = User.objects.create_user("platform-admin-2", password="another-long-password")
    user.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    return user


def alpha_h100(world) -> TenantQuota:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)


@pytest.fixture(autouse=True)
def _empty_broker():
    # Approvals enqueue reconciles that no worker consumes here: leave the test broker clean.
    purge_broker()
    yield
    purge_broker()


class TestConcurrentRequestsAndApprovals:
    def test_admitted_gpus_equal_what_fits_with_no_5xx(self, tx_world, live_server, capsys):
        requests_n = int(knob("REL_LOAD_REQUESTS", 200))
        clients = int(knob("REL_LOAD_CLIENTS", 32))
        member = Api(live_server.url, tx_world.users["member"])
        admins = [Api(live_server.url, tx_world.users["platform_admin"]), Api(live_server.url, second_admin())]
        # alpha: 8 nominal + 4 borrowable (beta's 8 H100 sit unused and may be lent).
        fits = 8 + 4
        latencies: list[float] = []

        def one(i: int) -> list:
            out = []
            started = time.perf_counter()
            created = member.post("/api/v1/deployments/", draft(f"load-{i}"))
            out.append(("create", created))
            if created.status_code == 201:
                approved = admins[i % 2].post(
                    f"/api/v1/deployments/{created.json()['id']}/approve/", {"reason": f"load {i}", "revision": 1}
                )
                out.append(("approve", approved))
            latencies.append(time.perf_counter() - started)
            return out

        started = time.perf_counter()
        with InvariantWatcher() as watcher, ThreadPoolExecutor(clients) as pool:
            results = [r for batch in pool.map(one, range(requests_n)) for r in batch]
        elapsed = time.perf_counter() - started

        by_kind = {kind: status_histogram(r for k, r in results if k == kind) for kind in ("create", "approve")}
        assert not [r for _, r in results if r.status_code >= 500], by_kind
        assert set(by_kind["create"]) <= {201, 400} and set(by_kind["approve"]) <= {200, 400}, by_kind
        refusals = [r.json() for _, r in results if r.status_code == 400]
        assert all("max_replicas" in body for body in refusals), refusals[:3]  # quota, named field
        quota = alpha_h100(tx_world)
        active = QuotaReservation.objects.filter(quota=quota, released__isnull=True)
        assert by_kind["approve"][200] == fits == quota.reserved_gpus == sum(r.gpus for r in active)
        assert ModelDeployment.objects.filter(state=State.APPROVED).count() == fits
        assert watcher.violations == [] and quota_violations() == []
        assert deployment_pair_violations() == []
        with capsys.disabled():
            print(
                f"\n[load] {requests_n} create+approve jobs, {clients} clients: {elapsed:.1f}s, "
                f"{len(results) / elapsed:.0f} req/s, job p50 {statistics.median(latencies) * 1000:.0f} ms "
                f"p95 {statistics.quantiles(latencies, n=20)[-1] * 1000:.0f} ms; create {dict(by_kind['create'])} "
                f"approve {dict(by_kind['approve'])}; admitted {fits} GPUs; {watcher.samples} invariant samples"
            )

    def test_two_admins_approving_the_same_request_get_one_200_and_one_409(self, tx_world, live_server, capsys):
        rounds = int(knob("REL_RACE_ROUNDS", 10))
        TenantQuota.objects.filter(tenant=tx_world.alpha, flavor=tx_world.h100).update(nominal_gpus=max(8, rounds))
        admins = [Api(live_server.url, tx_world.users["platform_admin"]), Api(live_server.url, second_admin())]
        deps = [
            deployment_services.deployment_create(
                tenant=tx_world.alpha,
                user=tx_world.users["member"],
                data={**draft(f"twice-{i}"), "flavor": tx_world.h100},
            )
            for i in range(rounds)
        ]
        outcomes = []
        for dep in deps:
            barrier = threading.Barrier(2)

            def approve(api: Api, dep_id=dep.pk, barrier=barrier):
                barrier.wait()
                return api.post(f"/api/v1/deployments/{dep_id}/approve/", {"reason": "race", "revision": 1})

            with ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(approve, admins))
            outcomes.append(sorted(r.status_code for r in answers))
            conflict = next(r for r in answers if r.status_code != 200)
            # The loser finds revision 1 approved already: its decision names a revision no longer waiting.
            assert conflict.json()["code"] == "stale_revision", conflict.content
        assert outcomes == [[200, 409]] * rounds
        for dep in deps:
            assert DeploymentEvent.objects.filter(deployment=dep, reason="Approved").count() == 1
            assert QuotaReservation.objects.filter(owner_id=dep.pk, owner_type="deployment").count() == 1
        assert alpha_h100(tx_world).reserved_gpus == rounds and quota_violations() == []
        with capsys.disabled():
            print(f"\n[double-approve] {rounds} rounds: every round exactly one 200 and one 409")


class TestQuotaChangesRacingReservations:
    def test_reserved_never_exceeds_nominal_plus_borrowing(self, tx_world, live_server, capsys):
        """Each round: a fresh tenant (own cohort) with 8 H100, three pending 4-GPU requests and a
        pending quota change to 0 / 4 / 8 GPUs. One admin approves the quota change while another
        approves the three deployments, all released at once."""
        rounds = int(knob("REL_RACE_ROUNDS", 10))
        member, admin_user = tx_world.users["member"], tx_world.users["platform_admin"]
        quota_admin = Api(live_server.url, admin_user)
        deploy_admin = Api(live_server.url, second_admin())
        tally: dict[str, int] = {}
        with InvariantWatcher() as watcher:
            for i in range(rounds):
                tenant = Tenant.objects.create(slug=f"race-{i}", display_name=f"Race {i}", cohort=f"race-{i}")
                Membership.objects.create(user=member, tenant=tenant, role="member")
                Membership.objects.create(user=tx_world.users["tenant_admin"], tenant=tenant, role="tenant_admin")
                TenantQuota.objects.create(tenant=tenant, flavor=tx_world.h100, nominal_gpus=8)
                member = User.objects.get(pk=member.pk)  # roles are cached per user object
                deps = [
                    deployment_services.deployment_create(
                        tenant=tenant, user=member, data={**draft(f"d{j}", max_replicas=4), "flavor": tx_world.h100}
                    )
                    for j in range(3)
                ]
                target = (i % 3) * 4
                change = quota_services.quota_change_request_create(
                    tenant=tenant,
                    flavor=tx_world.h100,
                    user=User.objects.get(pk=tx_world.users["tenant_admin"].pk),
                    nominal_gpus=target,
                    justification="race test",
                )
                barrier = threading.Barrier(1 + len(deps))

                def approve_change(barrier=barrier, change=change):
                    barrier.wait()
                    return quota_admin.post(f"/api/v1/quota-requests/{change.pk}/approve/", {"comment": "ok"})

                def approve_dep(dep, barrier=barrier):
                    barrier.wait()
                    return deploy_admin.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1})

                with ThreadPoolExecutor(1 + len(deps)) as pool:
                    change_answer = pool.submit(approve_change)
                    dep_answers = [f.result() for f in [pool.submit(approve_dep, d) for d in deps]]
                    change_answer = change_answer.result()
                answers = [change_answer, *dep_answers]
                assert all(r.status_code < 500 for r in answers), [(r.status_code, r.text[:200]) for r in answers]
                assert change_answer.status_code in (200, 409), change_answer.text
                assert {r.status_code for r in dep_answers} <= {200, 400}
                quota = TenantQuota.objects.get(tenant=tenant, flavor=tx_world.h100)
                approved = sum(r.status_code == 200 for r in dep_answers)
                assert quota.reserved_gpus == 4 * approved
                assert quota.reserved_gpus <= quota.nominal_gpus + quota.borrowing_limit_gpus
                if change_answer.status_code == 409:  # refused: reservations came first, values kept
                    assert change_answer.json()["code"] == "below_reserved" and quota.nominal_gpus == 8
                    assert quota.reserved_gpus > target
                key = f"change {change_answer.status_code}, {approved} deployment(s) approved"
                tally[key] = tally.get(key, 0) + 1
        assert watcher.violations == [] and quota_violations() == []
        with capsys.disabled():
            print(f"\n[quota-race] {rounds} rounds, {watcher.samples} invariant samples, outcomes {tally}")
