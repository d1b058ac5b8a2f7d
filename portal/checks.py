"""System checks for settings that serve a one-process demo but fail a real deployment (`check --deploy`),
and for settings that become Kubernetes names (every command)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

# Each web process (and each pod) would keep its own count, and a restart forgets them all;
# the dummy cache keeps nothing at all; the file cache has no atomic increment.
UNSHARED_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
    "django.core.cache.backends.filebased.FileBasedCache",
}


@register(Tags.security, deploy=True)
def check_sign_in_lockout_cache(app_configs, **kwargs):
    """portal.W001: failed sign-ins are counted in a cache the web processes do not share."""
    if getattr(settings, "AXES_HANDLER", "") != "axes.handlers.cache.AxesCacheHandler":
        return []
    alias = getattr(settings, "AXES_CACHE", "default")
    backend = settings.CACHES.get(alias, {}).get("BACKEND", "")
    if backend not in UNSHARED_CACHES:
        return []
    return [
        Warning(
            f"Failed sign-ins are counted in the {alias!r} cache, a {backend.rsplit('.', 1)[-1]}: not one "
            "count per address that every web process shares and a restart keeps, so an address gets "
            "more guesses than LOGIN_FAILURE_LIMIT.",
            hint="Set CACHE_URL=redis://… (the Redis every web process reaches).",
            id="portal.W001",
        )
    ]


# Settings that become Kubernetes names, and the syntax each must have (runtime.manifests.syntax):
# a value the API server would refuse stops the portal at start instead of every Kueue sync.
KUBERNETES_NAME_SETTINGS = (
    ("KUEUE_COHORT", "dns1123_label_problem"),  # a Cohort, like a tenant's own cohort
    ("KUEUE_CPU_FLAVOR", "dns1123_label_problem"),  # a ResourceFlavor and the llm-portal.io/flavor value
    ("KUEUE_CONFIG_NAMESPACE", "dns1123_label_problem"),
    ("KUEUE_CONFIG_MAP", "dns1123_subdomain_problem"),
    ("GATEWAY_NAME", "dns1123_subdomain_problem"),
    ("GATEWAY_NAMESPACE", "dns1123_label_problem"),
    ("API_KEY_NAMESPACE", "dns1123_label_problem"),
    ("MODEL_CACHE_PVC", "dns1123_subdomain_problem"),  # may be empty: no cache
    ("KARPENTER_NODE_CLASS_NAME", "dns1123_subdomain_problem"),  # may be empty: each flavor names its own
    ("MODEL_CACHE_STORAGE_CLASS", "dns1123_subdomain_problem"),  # may be empty: the cluster's default class
)
OPTIONAL_NAMES = frozenset({"MODEL_CACHE_PVC", "KARPENTER_NODE_CLASS_NAME", "MODEL_CACHE_STORAGE_CLASS"})


@register()
def check_kubernetes_names(app_configs, **kwargs):
    """portal.E001: a setting that becomes a Kubernetes name, node label or quantity is not valid as one."""
    from runtime.manifests import syntax
    from runtime.manifests.storage import cache_size_problem

    problems = []
    for name, rule in KUBERNETES_NAME_SETTINGS:
        value = getattr(settings, name, "")
        if not value and name in OPTIONAL_NAMES:
            continue
        if problem := getattr(syntax, rule)(value):
            problems.append(f"{name}={value!r}: {problem}")
    if problem := cache_size_problem(getattr(settings, "MODEL_CACHE_SIZE_GI", 1)):
        problems.append(f"MODEL_CACHE_SIZE_GI={settings.MODEL_CACHE_SIZE_GI!r}: {problem}")
    for key, value in getattr(settings, "KUEUE_CPU_NODE_LABELS", {}).items():
        if problem := syntax.label_key_problem(key) or syntax.label_value_problem(value):
            problems.append(f"KUEUE_CPU_NODE_LABELS: {problem}")
    return [
        Error(problem, hint="Kubernetes would refuse the objects named by it; fix the setting.", id="portal.E001")
        for problem in problems
    ]


@register()
def check_karpenter_ami(app_configs, **kwargs):
    """portal.E002: on AWS with Karpenter configured (a node role set), the EC2NodeClasses need a
    pinned AMI alias; "@latest" only with KARPENTER_AMI_ALLOW_LATEST (it drifts every GPU node on
    each AMI release). A set alias is checked on any platform: a typo must not wait for a sync."""
    from runtime.manifests.karpenter import ami_alias_problem

    alias = getattr(settings, "KARPENTER_AMI_ALIAS", "")
    configured = getattr(settings, "KARPENTER_PLATFORM", "") == "aws" and getattr(settings, "KARPENTER_NODE_ROLE", "")
    if not alias and not configured:
        return []
    problem = ami_alias_problem(alias, allow_latest=getattr(settings, "KARPENTER_AMI_ALLOW_LATEST", False))
    if problem is None:
        return []
    return [
        Error(
            f"KARPENTER_AMI_ALIAS: {problem}",
            hint="Set KARPENTER_AMI_ALIAS to an AMI release (docs/install.md, node pools).",
            id="portal.E002",
        )
    ]
