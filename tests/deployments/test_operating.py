"""Operating visibility of one deployment through the reconciler and the API: startup phases
recorded while it starts, the Kubernetes Events merged into its timeline, and its engine logs
(members only, bounded, redacted, downloadable) — against the Kubernetes API test server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deployments import operating, services
from deployments.choices import State
from deployments.models import DeploymentPhase
from deployments.reconcile import reconcile
from quotas.kueue import sync_kueue
from runtime import k8s
from runtime.phases import parse_time
from tests.support import operators
from tests.support.factories import draft
from tests.support.k8s.startup import put_event, put_pod, vllm_line

API = "/api/v1/deployments"
TOKEN = "hf_SeCrEtToKeN0123456789abcdef"


@pytest.fixture(autouse=True)
def _fresh_cache():
    from django.core.cache import cache

    cache.clear()


def start(world, api, name: str = "ops"):
    sync_kueue()
    member, admin = world.users["member"], world.users["platform_admin"]
    dep = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, name=name, max_replicas=1))
    services.deployment_approve(deployment_id=dep.pk, revision=dep.proposed_number, approver=admin)
    dep.refresh_from_db()
    reconcile(dep)
    dep.refresh_from_db()
    return dep


def run_pods(api, dep, *, log: str = "") -> str:
    """The scheduler, the kubelet and vLLM: one worker pod scheduled, pulled, loading weights."""
    now = datetime.now(UTC)
    pod = f"{dep.resource_name}-raycluster-abcde-worker-0"
    put_pod(api, "alpha", pod, dep.pk, scheduled=now, started=now)
    put_event(api, "alpha", ("Pod", pod), "Scheduled", f"Successfully assigned alpha/{pod}", now)
    put_event(api, "alpha", ("Pod", pod), "Pulled", "Container image pulled", now)
    api.set_pod_log("alpha", pod, "ray-worker", log or vllm_line(now, "Starting to load model /models/x..."))
    return pod


class TestPhases:
    def test_a_start_is_recorded_phase_by_phase_and_adds_up(self, world, cluster_api):
        dep = start(world, cluster_api)
        assert dep.state == "queued"
        assert set(DeploymentPhase.objects.filter(deployment=dep).values_list("name", flat=True)) == {"approved"}

        rayservice = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        operators.workload_for(cluster_api, rayservice, {"QuotaReserved": True, "Admitted": True})
        pod = run_pods(cluster_api, dep)
        reconcile(dep)
        dep.refresh_from_db()
        names = [p["name"] for p in operating.phases(dep)]
        assert names == ["approved", "queued", "admitted", "scheduled", "image_pulled", "weights_loading"]
        assert operating.phases(dep)[-1]["running"]

        operators.rayservice_ready(cluster_api, "alpha", dep.resource_name)
        put_pod(
            cluster_api,
            "alpha",
            pod,
            dep.pk,
            scheduled=datetime.now(UTC),
            started=datetime.now(UTC),
            ready=datetime.now(UTC),
        )
        reconcile(dep)
        dep.refresh_from_db()
        assert dep.state == "ready"
        rows = operating.phases(dep)
        assert [r["name"] for r in rows][-2:] == ["engine_ready", "ready"]
        assert not any(r["running"] for r in rows)
        total = (rows[-1]["start"] - rows[0]["start"]).total_seconds()
        assert sum(r["duration"] for r in rows) == pytest.approx(total)
        assert all(a["start"] <= b["start"] for a, b in zip(rows, rows[1:], strict=False))

        # Settled: later reconciles read no Events, pods or logs.
        before = cluster_api.proxied_requests()
        reconcile(dep)
        later = cluster_api.proxied_requests()[len(before) :]
        assert not [p for _, p in later if "/events" in p or "/pods" in p]

    def test_a_start_after_a_stop_starts_a_new_set(self, world, cluster_api):
        dep = start(world, cluster_api)
        first = DeploymentPhase.objects.get(deployment=dep, name="approved").at
        member = world.users["member"]
        services.deployment_stop(deployment_id=dep.pk, user=member)
        dep.refresh_from_db()
        reconcile(dep)
        services.deployment_start(deployment_id=dep.pk, user=member)  # no approval: it was approved
        dep.refresh_from_db()
        assert dep.state == State.APPROVED
        reconcile(dep)
        assert DeploymentPhase.objects.get(deployment=dep, name="approved").at > first
        assert DeploymentPhase.objects.filter(deployment=dep).count() >= 1

    def test_the_phases_api_lists_them_in_order(self, world, cluster_api):
        dep = start(world, cluster_api)
        body = world.client("viewer").get(f"{API}/{dep.pk}/phases/").json()
        assert [p["name"] for p in body["phases"]] == ["approved"] and body["phases"][0]["running"]


class TestTimeline:
    def test_kubernetes_events_join_the_portals_newest_first(self, world, cluster_api):
        dep = start(world, cluster_api)
        rayservice = cluster_api.get_object(k8s.RAYSERVICE, dep.resource_name, "alpha")
        operators.workload_for(cluster_api, rayservice, {"QuotaReserved": True, "Admitted": True})
        pod = run_pods(cluster_api, dep)
        put_event(
            cluster_api,
            "alpha",
            ("Pod", pod),
            "FailedScheduling",
            "0/4 nodes: Insufficient nvidia.com/gpu",
            datetime.now(UTC),
            type_="Warning",
            count=3,
        )
        body = world.client("viewer").get(f"{API}/{dep.pk}/timeline/?refresh=true").json()
        sources = {r["source"] for r in body["rows"]}
        assert sources == {"portal", "kubernetes"} and body["read_at"] and not body["error"]
        warning = next(r for r in body["rows"] if r["reason"] == "FailedScheduling")
        assert warning["type"] == "Warning" and warning["count"] == 3 and warning["object"] == f"Pod/{pod}"
        stamps = [parse_time(r["last"]) for r in body["rows"]]
        assert stamps == sorted(stamps, reverse=True)
        assert "Approved" in {r["reason"] for r in body["rows"] if r["source"] == "portal"}

    def test_without_refresh_the_page_reads_no_cluster(self, world, cluster_api):
        dep = start(world, cluster_api)
        before = len(cluster_api.proxied_requests())
        for _ in range(3):
            assert world.browser("member").get(f"/deployments/{dep.pk}/timeline/").status_code == 200
            assert world.browser("member").get(f"/deployments/{dep.pk}/").status_code == 200
        assert len(cluster_api.proxied_requests()) == before

    def test_refreshes_are_one_per_deployment_every_few_seconds(self, world, cluster_api):
        dep = start(world, cluster_api)
        before = len(cluster_api.proxied_requests())
        for _ in range(5):
            assert world.client("member").get(f"{API}/{dep.pk}/timeline/?refresh=true").status_code == 200
        events_reads = [p for _, p in cluster_api.proxied_requests()[before:] if p.endswith("/events")]
        assert len(events_reads) == 1

    def test_an_unreachable_cluster_says_so_and_keeps_the_portal_events(self, world, cluster_api):
        dep = start(world, cluster_api)
        cluster_api.fail_always(503)
        body = world.client("member").get(f"{API}/{dep.pk}/timeline/?refresh=true").json()
        assert "Could not read" in body["error"] and {r["source"] for r in body["rows"]} == {"portal"}

    @pytest.mark.parametrize("query", ["refresh=maybe", "refresh=%00", "refresh=" + "1" * 5000])
    def test_a_bad_refresh_flag_is_a_400(self, world, cluster_api, query):
        dep = start(world, cluster_api)
        response = world.client("member").get(f"{API}/{dep.pk}/timeline/?{query}")
        assert response.status_code == 400 and "refresh" in response.json()


class TestLogs:
    def test_members_read_redacted_bounded_tails_and_download_them(self, world, cluster_api):
        dep = start(world, cluster_api)
        lines = "".join(f"line {i}\n" for i in range(50)) + f"HF_TOKEN={TOKEN} --api-key sk-key-0123456789\n"
        pod = run_pods(cluster_api, dep, log=lines)
        body = world.client("member").get(f"{API}/{dep.pk}/logs/?lines=3").json()
        (tail,) = body["tails"]
        assert tail["pod"] == pod and tail["container"] == "ray-worker" and tail["truncated"]
        assert tail["text"].splitlines()[:2] == ["line 48", "line 49"]
        assert TOKEN not in tail["text"] and "sk-key-0123456789" not in tail["text"]
        download = world.browser("tenant_admin").get(f"/deployments/{dep.pk}/logs/?download=1")
        assert download["Content-Type"].startswith("text/plain")
        assert "attachment" in download["Content-Disposition"] and dep.resource_name in download["Content-Disposition"]
        text = download.content.decode()
        assert f"===== {pod} / ray-worker" in text and TOKEN not in text

    def test_byte_bound(self, world, cluster_api):
        dep = start(world, cluster_api)
        run_pods(cluster_api, dep, log="x" * 10_000 + "\n")
        (tail,) = world.client("member").get(f"{API}/{dep.pk}/logs/?bytes=100").json()["tails"]
        assert len(tail["text"].encode()) == 100 and tail["truncated"]

    @pytest.mark.parametrize(
        "query", ["lines=0", "lines=-1", "lines=99999999", "bytes=abc", "bytes=0", "lines=1e3", "download=perhaps"]
    )
    def test_out_of_bounds_parameters_are_a_400(self, world, cluster_api, query):
        dep = start(world, cluster_api)
        assert world.client("member").get(f"{API}/{dep.pk}/logs/?{query}").status_code == 400

    def test_viewers_and_platform_admins_see_why_not_in_the_page(self, world, cluster_api):
        dep = start(world, cluster_api)
        run_pods(cluster_api, dep, log=f"HF_TOKEN={TOKEN}\n")
        for role in ("viewer", "platform_admin"):
            page = world.browser(role).get(f"/deployments/{dep.pk}/logs/")
            assert page.status_code == 200 and "members of the tenant" in page.content.decode()
            assert TOKEN not in page.content.decode()
            download = world.browser(role).get(f"/deployments/{dep.pk}/logs/?download=1")
            assert "line" not in download.content.decode() and TOKEN not in download.content.decode()
        assert world.browser("other_member").get(f"/deployments/{dep.pk}/logs/").status_code == 404

    def test_the_detail_page_offers_the_logs_only_to_those_who_may_read_them(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name="x"))
        for role, offered in (("viewer", False), ("platform_admin", False), ("member", True), ("tenant_admin", True)):
            html = world.browser(role).get(f"/deployments/{dep.pk}/").content.decode()
            assert ("Show logs" in html) is offered and (f"/deployments/{dep.pk}/logs/" in html) is offered, role
            said = "only the tenant's members and tenant admins read them" in html
            assert said is not offered, role
