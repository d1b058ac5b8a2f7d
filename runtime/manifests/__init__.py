"""Pure builders for every object the portal puts on a cluster.

Each function here is a function of frozen specs (`runtime.spec`) and nothing else: no ORM,
no I/O, no `kubernetes` import. `runtime.k8s` applies what these return; the tests compare
them with golden files and validate them against the real CRD schemas in ../shared.

- `common`: labels, annotations, ports, GPU resources, volumes, model-source paths;
- `rayservice`: the RayService and its Ray Serve LLM app (kuberay, and the local backend's app);
- `kueue`: a tenant's Namespace, ResourceFlavors (GPU and CPU), Cohort, ClusterQueue and LocalQueue;
- `kserve`: the InferenceService (kserve), and its status read back.

Callers import from the submodule; the public renderers are also named here, as the package's
surface.
"""

from runtime.manifests.kserve import render_inferenceservice
from runtime.manifests.kueue import (
    KUEUE_API_VERSION,
    render_cluster_queue,
    render_cohort,
    render_cpu_resource_flavor,
    render_local_queue,
    render_namespace,
    render_resource_flavor,
)
from runtime.manifests.rayservice import (
    RAY_API_VERSION,
    SERVE_APP_NAME,
    llm_config,
    rayservice_name,
    render_rayservice,
    render_serve_config,
    serve_config_v2,
)

__all__ = [
    "KUEUE_API_VERSION",
    "RAY_API_VERSION",
    "SERVE_APP_NAME",
    "llm_config",
    "rayservice_name",
    "render_cluster_queue",
    "render_cohort",
    "render_cpu_resource_flavor",
    "render_inferenceservice",
    "render_local_queue",
    "render_namespace",
    "render_rayservice",
    "render_resource_flavor",
    "render_serve_config",
    "serve_config_v2",
]
