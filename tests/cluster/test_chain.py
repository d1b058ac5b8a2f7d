"""Request → approve → Kueue suspends → Workload admitted in the reserved flavor → RayCluster →
pods bound to a KWOK node of that flavor → RayService Ready, on the real controllers."""

from deployments.choices import State
from runtime import k8s
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of


def test_an_approved_request_runs_on_the_flavor_it_reserved_and_the_portal_says_ready(world, kube):
    onboard(kube, world.h100, world.a100)
    dep = request_and_approve(world, flavor=world.h100)
    assert dep.state == State.APPROVED
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")

    namespace = dep.tenant.namespace
    workload = workload_of(kube, dep)
    assert condition(workload, "Admitted")["status"] == "True"
    flavors = {ps["name"]: ps["flavors"] for ps in workload["status"]["admission"]["podSetAssignments"]}
    assert [f for name, fl in flavors.items() for f in fl.values() if "gpu" in name or "worker" in name]
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, namespace)
    assert condition(service, "Ready")["status"] == "True"
    nodes = {n: kube.raw(f"/api/v1/nodes/{n}")["metadata"]["labels"] for n in kube.nodes}
    pods = kube.pods(namespace)
    pending = [
        (p["metadata"]["name"], [c.get("message") for c in p["status"].get("conditions", [])])
        for p in pods
        if p["status"]["phase"] != "Running"
    ]
    assert not pending, pending
    for pod in pods:
        labels = nodes[pod["spec"]["nodeName"]]
        wants_gpu = any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in pod["spec"]["containers"]
        )
        assert ("nvidia.com/gpu.product" in labels or world.h100.name in labels.values()) == wants_gpu, (pod, labels)
    assert dep.reserved_gpus == dep.gpus_needed


def test_the_chain_ends_on_the_dashboard_with_the_metrics_the_running_pods_serve(world, kube, settings):
    """The last link (issue 38): with no Prometheus, the collector lists the deployment's Running
    pods on the real API server, scrapes each pod's metrics port (the stand-in head answers on
    every pod address with a real Ray Serve LLM exposition) and the dashboard plots what it read.
    Idle first (gauges only: no earlier snapshot to take rates from), then under load."""
    from metrics.charts import CHARTS
    from metrics.collect import collect, scraped_ids
    from metrics.models import MetricSample

    settings.PROMETHEUS_URL = None
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    running = [p for p in kube.pods(dep.tenant.namespace) if p["status"].get("phase") == "Running"]
    assert running and dep.pk in scraped_ids()

    assert collect([dep.pk]) == 1
    idle = MetricSample.objects.get(deployment=dep)
    assert (idle.running, idle.generation_tokens_per_s) == (0.0, None)

    kube.set_head_metrics(running[0]["status"]["podIP"], "ray-serve-llm-vllm-0.32-cpu-under-load.prom")
    try:
        assert collect([dep.pk]) == 1
    finally:
        kube.set_head_metrics(running[0]["status"]["podIP"], None)
    busy = MetricSample.objects.filter(deployment=dep).latest("ts")
    # 39 running requests in that exposition, on each pod the collector read (every pod of the
    # stand-in serves it); 8193 - 1828 generated tokens since the idle read: a rate above zero.
    assert busy.running == 39.0 * len(running)
    assert busy.generation_tokens_per_s > 0

    member = world.browser("member")
    charts = member.get(f"/deployments/{dep.pk}/charts/?window=1h").json()
    assert charts["_meta"]["points"] == 2
    assert set(charts) == set(CHARTS) | {"_meta"}  # every chart drawn, none left empty for lack of points
