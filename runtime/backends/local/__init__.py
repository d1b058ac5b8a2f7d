"""The `local` backend: serve a deployment on this machine with vLLM's CPU build.

The engine is the same Ray Serve LLM application the kuberay backend renders
(`runtime.manifests.rayservice.llm_config` / `serve_config_v2`), adapted only where a CPU demands
it (`engine.local_llm_config`): no `accelerator_type`, a `{"CPU": 1}` placement group, one-way
parallelism, a KV block size that is a multiple of 32, no GPU memory fraction.

Two ways to run it, chosen by `settings.LOCAL_ENGINE`:

* ``vllm`` (default) — ``python -m vllm.entrypoints.openai.api_server`` with the app config's
  `engine_kwargs` as flags. Measured on a 2-core / 24 GiB box with the tiny model from
  `manage.py make_tiny_model`: healthy after 54 s (104 s on the very first start, which fills
  vLLM's torch.compile cache), 3 processes, ~1.5 GiB RSS.
* ``ray`` — a local Ray cluster (`ray.init(num_cpus=4)`; Ray Serve LLM refuses to place the
  replica with fewer logical CPUs) running `serve_config_v2` itself through its import_path.
  Same model, compile cache warm: application RUNNING after 142 s, 14 processes, ~5.5 GiB RSS.
  It serves the identical app, so it is the mode to reproduce a cluster issue locally.

The plain server is the default because on two cores the Ray control plane (GCS, raylet,
dashboard agents, Serve controller, proxy, ingress replica) costs more than the engine: 2.6x the
cold start and ~3.5x the memory, for the same vLLM engine and the same `vllm:`-family metrics.

Processes: the engine is started detached (`start_new_session`), so it outlives the Celery
worker that started it and never receives the worker's terminal signals. Its pid, the pid's
start time (so a recycled pid is never mistaken for it), the boot id, ports, spec hash and log
path are written to ``LOCAL_RUNTIME_DIR/<deployment_id>/state.json``; any worker, after any
restart, finds what it owns there. Removal signals the whole *session*, not just the process
group: Ray puts each actor (and vLLM's engine core under it) in a process group of its own
inside the launcher's session, and killing only the leader's group orphans them (seen).

Endpoint: a deployment's ports are given once, at its first start, and kept in
``LOCAL_RUNTIME_DIR/ports-assigned.json`` (`ports.PortAllocator.assign`), beyond its run directory:
a new revision, a stop and resume or a reboot start the engine on the same port, so the endpoint
URL users copied keeps working. Only when another process listens there at start does it move (a
Warning event, EndpointMoved, says so; the portal shows the new URL). Key changes never restart
the engine: it re-reads its key file (`keys.EngineKeyCheck`).

Gateway (`LocalBackend(gateway=True)`, what `instance()` builds when settings.LOCAL_GATEWAY is
on; off by default): one local gateway process (`runtime.gateway_local`, started by `gateway.LocalGateway` with
the first engine) fronts every engine. A deployment's endpoint URL is then the gateway's port for
it (the port the deployment's engine had before, so that URL keeps working), each tenant gets a
port that routes by `model`, keys are checked there against digests, and a key change rewrites
the gateway's routing file only. The engine moves to a port of its own that accepts only the
gateway's key.

Isolation: the engine runs code that ships with a model, so its environment is an allow-list
(`engine.engine_environment`: no SECRET_KEY, database, broker or cloud credentials), and it is only
ever pointed at a local path that resolves, symlinks included, inside LOCAL_MODEL_ROOT
(`paths.engine_model_source`); deployments.validation refuses such sources before they are saved.

Nothing here imports vllm, ray or torch at module level; `python -m runtime.backends.local.launcher
ray-serve` is the Ray launcher and imports Ray only when run.

Modules: `engine` (the app config, the engine's environment, the two ways to run it), `paths`
(what the engine may open), `processes` (detached sessions), `ports`, `keys` (the API keys vLLM
checks, handed over outside its arguments), `gateway` (the local gateway's routing file, ports and
process), `backend` (LocalBackend), `launcher` (the Ray launcher).
"""
