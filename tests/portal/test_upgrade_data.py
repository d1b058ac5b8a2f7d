"""Upgrading from the previous landed release keeps the data (issue 40, "Operate").

The test database is migrated back to the migration leaves of the previous release (PREVIOUS_LEAVES),
filled through that state's historical models with a row of every model the portal had then
(users, tenants, flavors, quotas, reservations, quota requests, memberships, a deployment with its
revision, events and phases, API keys, knox tokens, audit rows, metrics, usage ledger rows, budget
notices, SCIM groups), and migrated to the latest schema, which is what the chart's migrate hook
does on `helm upgrade`. Every row and every column of that release must come out unchanged, the
columns added since hold their documented defaults, and the portal serves the same data: the
member's API token lists the tenant, the deployment and the key, the endpoint key still
authenticates, and the passwords still check. Then back to the previous leaves (every migration
since is reversible, asserted) and forward again, with the same checks.

The test migrates the test database itself (real commits) and always returns it to the latest
state, so the tests after it run on the schema they expect.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.hashers import check_password, make_password
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from knox.crypto import create_token_string, hash_token
from knox.settings import CONSTANTS

pytestmark = pytest.mark.django_db(transaction=True)

# The migration leaves of the previous landed release: git commit 43e9df6 ("Local backend: an
# exited engine's code is read after the waiter thread records it"), the landing before the last
# one when this test was written (before the Helm chart). Found with `git show
# 43e9df6:<app>/migrations/`. Apps not named here (Django's own, axes, django_celery_beat) did not
# change since; reclaim and runtime have no migrations; an app of the project added since starts
# at zero (previous()).
PREVIOUS_RELEASE = "43e9df6"
PREVIOUS_LEAVES = [
    ("core", "0002_audit_origin"),
    ("portal", "0004_scimgroup"),
    ("quotas", "0007_tenant_limits_per_key"),
    ("deployments", "0009_quantization_label"),
    ("metrics", "0004_windows_and_request_phases"),
    ("access", "0001_initial"),
    ("usage", "0001_initial"),
]
OUR_APPS = [app for app, _ in PREVIOUS_LEAVES]
ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "an old password that still works"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def latest(executor: MigrationExecutor) -> list[tuple[str, str]]:
    return executor.loader.graph.leaf_nodes()


def previous(executor: MigrationExecutor) -> list[tuple[str, str | None]]:
    """Our apps at the previous release's leaves, an app of the project added since at zero (it
    had no tables then), every other app (Django's, axes, celery beat) at its latest migration."""
    targets: list[tuple[str, str | None]] = list(PREVIOUS_LEAVES)
    for app, name in latest(executor):
        if app in OUR_APPS:
            continue
        ours = Path(django_apps.get_app_config(app).path).parent == ROOT  # not .venv's
        targets.append((app, None) if ours else (app, name))
    return targets


def state_apps(executor: MigrationExecutor, targets: list[tuple[str, str | None]]):
    """The historical models at `targets` (an app at zero has none)."""
    return executor.loader.project_state([node for node in targets if node[1] is not None]).apps


def migrate(executor: MigrationExecutor, targets: list[tuple[str, str]]) -> None:
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.fixture
def executor(transactional_db):
    """A migration executor on the test database; back at the latest state afterwards."""
    yield MigrationExecutor(connection)
    back = MigrationExecutor(connection)
    back.migrate(latest(back))


def fill(apps) -> dict[str, Any]:
    """One row (or two) of every model of the previous release, through its historical models;
    returns the secrets (plaintexts) the checks need."""
    m = apps.get_model
    user = m("auth", "User")
    admin = user.objects.create(
        username="root", email="root@example.com", is_staff=True, is_superuser=True, password=make_password(PASSWORD)
    )
    member = user.objects.create(username="mia", email="mia@example.com", password=make_password(PASSWORD))
    group = m("auth", "Group").objects.create(name="platform-admins")
    group.user_set.add(admin)
    view_audit = m("auth", "Permission").objects.get(codename="view_auditevent")
    group.permissions.add(view_audit)
    member.user_permissions.add(view_audit)
    h100 = m("quotas", "GpuFlavor").objects.create(
        name="h100",
        gpu_model="NVIDIA H100 80GB",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        price_per_gpu_hour=Decimal("2.4500"),
        provisioning={"mode": "karpenter", "instanceTypes": ["p5.48xlarge"]},
    )
    alpha = m("quotas", "Tenant").objects.create(
        slug="alpha",
        display_name="Alpha research",
        cohort="research",
        auto_approve_max_gpus=2,
        max_gpus_per_deployment=4,
        monthly_budget=Decimal("1500.00"),
        budget_hard_stop=True,
        idle_stop_hours=12,
        requests_per_minute=600,
        tokens_per_minute=120000,
        serving_schedule="Mon-Fri 08:00-20:00",
        namespace_created=NOW,
        kueue_status={"clusterQueue": "alpha", "synced": True},
    )
    alpha.allowed_flavors.add(h100)
    m("quotas", "RetiredTenantSlug").objects.create(slug="old-alpha", retired_at=NOW)
    m("quotas", "Membership").objects.create(tenant=alpha, user=member, role="tenant_admin")
    quota = m("quotas", "TenantQuota").objects.create(
        tenant=alpha, flavor=h100, nominal_gpus=8, borrowing_limit_gpus=2, lending_limit_gpus=4, reserved_gpus=2
    )
    m("quotas", "QuotaChangeRequest").objects.create(
        tenant=alpha, flavor=h100, requested_by=member, nominal_gpus=16, justification="Llama 70B evaluation"
    )
    spec = dict(
        model_source="meta-llama/Meta-Llama-3-8B-Instruct",
        served_model_name="llama-3-8b",
        hf_token_secret="hf-token-alpha",
        backend="kuberay",
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        min_replicas=1,
        max_replicas=1,
        target_ongoing_requests=8,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        enable_chunked_prefill=True,
        max_num_batched_tokens=4096,
        quantization="fp8",
        dtype="bfloat16",
        parameter_count_b=8.0,
        serving_profile="latency",
    )
    deployment = m("deployments", "ModelDeployment").objects.create(
        tenant=alpha,
        flavor=h100,
        name="llama",
        created_by=member,
        approved_by=admin,
        state="ready",
        generation=1,
        observed_generation=1,
        reserved_gpus=2,
        endpoint_url="https://llm.example.com/alpha/llama/v1",
        metrics_url="http://llama-head-svc.tenant-alpha:8080/metrics",
        cluster_uid="2f6b9a0e-7c1d-4f3e-9a43-0c8f1d2e3b4a",
        conditions=[{"type": "Ready", "status": "True"}],
        status_message="Serving",
        **spec,
    )
    revision = m("deployments", "DeploymentRevision").objects.create(
        deployment=deployment,
        number=1,
        spec={**spec, "flavor": h100.pk},
        gpus=2,
        status="approved",
        message="Requested.",
        proposed_by=member,
        decided_by=admin,
        decided_at=NOW,
        decision_reason="Fits the quota.",
    )
    deployment.serving_revision = revision
    deployment.save(update_fields=["serving_revision"])
    m("deployments", "DeploymentEvent").objects.create(
        deployment=deployment, reason="Approved", from_state="pending_approval", to_state="approved", actor=admin
    )
    m("deployments", "DeploymentPhase").objects.create(deployment=deployment, name="ready", at=NOW)
    m("quotas", "QuotaReservation").objects.create(
        quota=quota, owner_type="deployment", owner_id=deployment.pk, gpus=2, borrowed_gpus=0
    )
    key = "llmp_" + "k" * 43  # access.services: KEY_PREFIX + token_urlsafe(32)
    m("access", "ApiKey").objects.create(
        tenant=alpha,
        deployment=deployment,
        name="ci pipeline",
        prefix=key[:13],
        key_hash=hashlib.sha256(key.encode()).hexdigest(),
        created_by=member,
        expires_at=NOW + dt.timedelta(days=3650),
        gateway_state="published",
    )
    m("access", "ApiKey").objects.create(
        tenant=alpha,
        name="revoked one",
        prefix="llmp_revoked",
        key_hash="0" * 64,
        created_by=member,
        expires_at=NOW + dt.timedelta(days=90),
        revoked_at=NOW,
        revoked_by=admin,
    )
    token = "llmp_" + create_token_string()  # as knox mints it (TOKEN_PREFIX)
    m("portal", "ApiToken").objects.create(
        digest=hash_token(token),
        token_key=token[: CONSTANTS.TOKEN_KEY_LENGTH],
        user=member,
        name="laptop",
        expiry=NOW + dt.timedelta(days=3650),
    )
    m("portal", "ScimGroup").objects.create(display_name="ml-team", external_id="okta-123").members.add(member)
    m("core", "AuditEvent").objects.create(
        actor=admin,
        actor_name="root",
        tenant=alpha,
        action="deployment.approve",
        object_type="deployments.modeldeployment",
        object_id=str(deployment.pk),
        reason="Fits the quota.",
        changes={"state": ["pending_approval", "approved"]},
        ip_address="192.0.2.10",
        user_agent="Mozilla/5.0",
    )
    m("metrics", "MetricSample").objects.create(
        deployment=deployment, ts=NOW, resolution=60, requests_per_s=3.5, ttft_p95=0.42, kv_cache_pct=37.0
    )
    m("metrics", "ScrapeState").objects.create(
        deployment=deployment, snapshot={"vllm:num_requests_running": 2}, last_success=NOW, last_error=""
    )
    m("metrics", "AdvisorObjectives").objects.create(deployment=deployment, ttft_p95_objective_s=0.8)
    ledger = dict(
        tenant=alpha,
        deployment=deployment,
        reserved_gpu_hours=Decimal("48.000000"),
        serving_gpu_hours=Decimal("40.000000"),
        prompt_tokens=12_345_678,
        generation_tokens=2_345_678,
        cost=Decimal("117.60"),
    )
    m("usage", "UsageDay").objects.create(day=dt.date(2026, 11, 29), **ledger)
    m("usage", "UsageMonth").objects.create(month=dt.date(2026, 11, 1), note="", **ledger)
    m("usage", "BudgetNotice").objects.create(
        tenant=alpha, month=dt.date(2026, 11, 1), level=80, spent=Decimal("1200.00"), budget=Decimal("1500.00")
    )
    return {"token": token, "key": key}


def models_of(apps) -> list:
    return [
        model for app in [*OUR_APPS, "auth"] for model in apps.get_app_config(app).get_models(include_auto_created=True)
    ]


def snapshot(apps) -> dict[str, list[dict[str, Any]]]:
    """Every row of every model of `apps` (many-to-many tables too), every concrete column, by primary key."""
    return {
        model._meta.label: [
            {f.attname: getattr(row, f.attname) for f in model._meta.concrete_fields}
            for row in model.objects.order_by("pk")
        ]
        for model in models_of(apps)
    }


def rows_now(old: dict[str, list[dict[str, Any]]], apps) -> dict[str, list[dict[str, Any]]]:
    """The same models' rows now, restricted to the columns they had then."""
    now = {}
    for label, rows in old.items():
        model = apps.get_model(label)
        columns = list(rows[0]) if rows else ["pk"]
        now[label] = [{c: getattr(row, c) for c in columns} for row in model.objects.order_by("pk")] if rows else []
    return now


def kept(then: Any, now: Any) -> bool:
    """The value survived: equal, or a JSON object that gained keys (a data migration may add a
    field to stored specs, as deployments 0011 and 0012 add the KV-cache dtype and the model
    revision with their defaults) while every key it had keeps its value."""
    if isinstance(then, dict) and isinstance(now, dict):
        return all(key in now and kept(value, now[key]) for key, value in then.items())
    return then == now


def changes(old: dict[str, list[dict[str, Any]]], new: dict[str, list[dict[str, Any]]]) -> list[tuple]:
    """(model, row, column, then, now) for every value that differs; a lost or added row too."""
    found: list[tuple] = []
    for label, rows in old.items():
        if len(rows) != len(new[label]):
            found.append((label, "rows", len(rows), len(new[label])))
            continue
        for then, now in zip(rows, new[label], strict=True):
            found += [(label, then.get("id"), c, v, now[c]) for c, v in then.items() if not kept(v, now[c])]
    return found


def used_at(rows: dict[str, list[dict[str, Any]]]) -> dt.datetime:
    (token,) = rows["portal.ApiToken"]
    assert token["last_used"] is not None
    return token["last_used"]


def assert_the_portal_serves_it(secrets: dict[str, Any]) -> None:
    """The data as a person meets it: through the API with their token, the endpoint key, the
    password, and the columns added since at their defaults."""
    from access.services import key_lookup
    from deployments.models import ModelDeployment
    from quotas.models import Tenant

    client = Client(HTTP_AUTHORIZATION=f"Token {secrets['token']}")
    tenants = client.get("/api/v1/tenants/")
    assert tenants.status_code == 200, tenants.content
    (tenant,) = tenants.json()["results"]
    assert (tenant["slug"], tenant["display_name"]) == ("alpha", "Alpha research")
    deployments = client.get("/api/v1/deployments/")
    assert deployments.status_code == 200, deployments.content
    (deployment,) = deployments.json()["results"]
    assert (deployment["name"], deployment["state"], deployment["endpoint_url"]) == (
        "llama",
        "ready",
        "https://llm.example.com/alpha/llama/v1",
    )
    keys = client.get("/api/v1/keys/")
    assert keys.status_code == 200, keys.content
    assert sorted(k["name"] for k in keys.json()["results"]) == ["ci pipeline", "revoked one"]
    found = key_lookup(secrets["key"])
    assert found is not None and found.name == "ci pipeline" and found.deployment.name == "llama"
    assert check_password(PASSWORD, type(found.created_by).objects.get(username="mia").password)
    alpha = Tenant.objects.get(slug="alpha")
    assert (alpha.model_cache_size_gi, alpha.model_cache_storage_class, alpha.model_cache_status) == (None, "", {})
    assert not alpha.secrets.exists()
    assert ModelDeployment.objects.get().backend == "kuberay"


def test_an_upgrade_from_the_previous_release_keeps_every_row(executor) -> None:
    for node in PREVIOUS_LEAVES:
        assert node in executor.loader.graph.nodes, f"{node} of {PREVIOUS_RELEASE} is gone from the migrations"
    migrate(executor, previous(executor))
    old_apps = state_apps(executor, previous(executor))
    secrets = fill(old_apps)
    before = snapshot(old_apps)
    assert all(before.values()), [label for label, rows in before.items() if not rows]

    # What `helm upgrade`'s migrate hook runs: every migration since, forwards.
    executor.loader.build_graph()  # what is applied now
    since = executor.migration_plan(latest(executor), clean_start=False)
    assert since, "nothing to upgrade: PREVIOUS_LEAVES is the latest schema"
    migrate(executor, latest(executor))
    new_apps = state_apps(executor, latest(executor))
    assert changes(before, rows_now(before, new_apps)) == []
    assert_the_portal_serves_it(secrets)
    # Serving the API wrote one thing: the token's last use. The baseline has it from here on.
    used = rows_now(before, new_apps)
    assert changes(before, used) == [("portal.ApiToken", None, "last_used", None, used_at(used))]
    before["portal.ApiToken"][0]["last_used"] = used_at(used)

    # Every migration since the previous release can be undone (a rollback to it keeps the data).
    irreversible = [
        f"{migration.app_label}.{migration.name}: {operation.describe()}"
        for migration, _ in since
        for operation in migration.operations
        if not operation.reversible
    ]
    assert irreversible == []
    migrate(executor, previous(executor))
    assert changes(before, rows_now(before, state_apps(executor, previous(executor)))) == []
    migrate(executor, latest(executor))
    assert changes(before, rows_now(before, state_apps(executor, latest(executor)))) == []
    assert_the_portal_serves_it(secrets)
