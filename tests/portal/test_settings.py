"""Settings refuse bad values loudly (each case starts a fresh interpreter with that env)."""

import os
import subprocess
import sys

import pytest

from portal import env
from tests.support.shared import PROJECT_ROOT

GOOD = {
    "DATABASE_URL": "postgres://u@db:5432/portal",
    "SECRET_KEY": "s" * 60,
    "CELERY_BROKER_URL": "redis://redis:6379/0",
    "ALLOWED_HOSTS": "portal.example.com",
}


SHOW_DEBUG = "import django; from django.conf import settings; settings.INSTALLED_APPS; print('DEBUG', settings.DEBUG)"


def load_settings(probe: str = SHOW_DEBUG, **overrides) -> subprocess.CompletedProcess:
    environment = {
        k: v for k, v in os.environ.items() if k not in GOOD and k not in ("DEBUG", "HTTPS", "KUBERNETES_URL")
    }
    environment.update({**GOOD, **overrides})
    environment = {k: v for k, v in environment.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT_ROOT,
        env={**environment, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("DEBUG", "yes please", "DEBUG='yes please' is not a boolean"),
        ("DATABASE_URL", "mysql://x@y/z", "DATABASE_URL="),
        ("CELERY_BROKER_URL", "kafka://x", "CELERY_BROKER_URL="),
        ("SECRET_KEY", None, "SECRET_KEY must be set"),
        ("ALLOWED_HOSTS", "a,,b", "ALLOWED_HOSTS='a,,b' has an empty item"),
        ("API_TOKEN_TTL_DAYS", "ninety", "API_TOKEN_TTL_DAYS='ninety' is not an integer"),
        ("METRICS_SCRAPE_SECONDS", "0", "below the minimum"),
        ("PROMETHEUS_SCRAPE_INTERVAL_SECONDS", "0.5", "PROMETHEUS_SCRAPE_INTERVAL_SECONDS=0.5 is below the minimum"),
        ("PROMETHEUS_SCRAPE_INTERVAL_SECONDS", "30s", "PROMETHEUS_SCRAPE_INTERVAL_SECONDS='30s' is not a number"),
        ("KUBERNETES_URL", "ftp://cluster", "KUBERNETES_URL="),
        ("NCCL_DEBUG", "LOUD", "NCCL_DEBUG='LOUD' must be one of"),
        ("KUEUE_QUEUEING_STRATEGY", "LIFO", "KUEUE_QUEUEING_STRATEGY='LIFO' must be one of"),
        # Kueue's CRD enums (runtime/preemption.py): Any is a reclaimWithinCohort value only.
        ("KUEUE_RECLAIM_WITHIN_COHORT", "Always", "KUEUE_RECLAIM_WITHIN_COHORT='Always' must be one of"),
        ("KUEUE_WITHIN_CLUSTER_QUEUE", "Any", "KUEUE_WITHIN_CLUSTER_QUEUE='Any' must be one of"),
        ("KARPENTER_SUBNET_TAGS", "karpenter.sh/discovery", "KARPENTER_SUBNET_TAGS: 'karpenter.sh/discovery' is not"),
        ("KARPENTER_ROOT_VOLUME_GIB", "5", "below the minimum"),
        # KServe v0.20.0's legacy names are not the portal's (runtime.manifests.kserve).
        ("KSERVE_DEPLOYMENT_MODE", "Serverless", "KSERVE_DEPLOYMENT_MODE='Serverless' must be one of"),
        ("MODEL_IMPORT_S3_ENDPOINT_URL", "s3.example.com", "MODEL_IMPORT_S3_ENDPOINT_URL='s3.example.com' has scheme"),
        ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE", "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set together"),
        ("MODEL_IMPORT_S3_DEADLINE_SECONDS", "0", "MODEL_IMPORT_S3_DEADLINE_SECONDS=0.0 is below the minimum"),
    ],
)
def test_bad_values_stop_startup_naming_the_variable(name, value, message):
    result = load_settings(**{name: value})
    assert result.returncode != 0
    assert message in result.stderr


def test_knative_mode_behind_the_gateway_stops_startup():
    """A Knative-mode predictor has no Service a Gateway route can target (docs/install.md, "KServe")."""
    result = load_settings(KSERVE_DEPLOYMENT_MODE="Knative", GATEWAY_PUBLIC_URL="https://llm.example.com")
    assert result.returncode != 0
    assert "KSERVE_DEPLOYMENT_MODE=Knative cannot be used with GATEWAY_PUBLIC_URL" in result.stderr
    assert load_settings(KSERVE_DEPLOYMENT_MODE="Knative").returncode == 0


def test_the_preemption_settings_reach_every_clusterqueue():
    """KUEUE_RECLAIM_WITHIN_COHORT / KUEUE_WITHIN_CLUSTER_QUEUE from the environment are what the
    platform renders; unset, they are what every ClusterQueue had before (Any, LowerPriority)."""
    probe = (
        "import django; django.setup(); from runtime.platform import platform_spec; p = platform_spec(); "
        "print(p.reclaim_within_cohort, p.within_cluster_queue)"
    )
    chosen = load_settings(
        probe, KUEUE_RECLAIM_WITHIN_COHORT="Never", KUEUE_WITHIN_CLUSTER_QUEUE="LowerOrNewerEqualPriority"
    )
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.split() == ["Never", "LowerOrNewerEqualPriority"]
    default = load_settings(probe, KUEUE_RECLAIM_WITHIN_COHORT=None, KUEUE_WITHIN_CLUSTER_QUEUE=None)
    assert default.stdout.split() == ["Any", "LowerPriority"], default.stderr


def test_production_like_env_loads_with_debug_off():
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert "DEBUG False" in result.stdout


def test_with_nothing_set_the_demo_runs_on_sqlite_with_a_serverless_broker(tmp_path):
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "HTTPS")
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from django.conf import settings; from portal.celery import app;"
            " print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL, settings.DEBUG,"
            " type(app.connection_for_write().transport).__module__)",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_VAR_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    # The broker's transport is the project's whole-message one (portal/broker.py, tests/portal/test_broker.py).
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://localhost/", "True", "portal.broker"]


class TestHelpers:
    def test_env_bool_accepts_only_clear_words(self, monkeypatch):
        monkeypatch.setenv("X_FLAG", "On")
        assert env.env_bool("X_FLAG", False) is True
        monkeypatch.setenv("X_FLAG", "2")
        with pytest.raises(Exception, match="not a boolean"):
            env.env_bool("X_FLAG", False)

    def test_env_float_refuses_nan(self, monkeypatch):
        monkeypatch.setenv("X_NUM", "nan")
        with pytest.raises(Exception, match="finite"):
            env.env_float("X_NUM", 1.0)


@pytest.mark.parametrize(("value", "engine"), [("1", "vllm"), ("0", "vllm"), ("vllm", "vllm"), ("ray", "ray")])
def test_the_readmes_local_engine_switch_reaches_the_portal_harmlessly(value, engine):
    """`LOCAL_ENGINE=1 ./scripts/demo` exports the switch to manage.py: it stopped migrate once."""
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.LOCAL_ENGINE)"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **GOOD, "LOCAL_ENGINE": value, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == engine


def test_a_local_engine_naming_no_engine_stops_startup():
    result = load_settings(LOCAL_ENGINE="vlm")
    assert result.returncode != 0
    assert "LOCAL_ENGINE='vlm' must be one of ['ray', 'vllm']" in result.stderr
