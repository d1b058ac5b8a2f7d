#!/usr/bin/env bash
# Run every benchmark in turn (never in parallel: they would measure each other).
# Needs PostgreSQL (BENCH_PG, default postgres://postgres@127.0.0.1:5432; each script creates and
# drops its own bench_portal_<name> database), Redis for B2 (BENCH_REDIS, default
# redis://127.0.0.1:6379/11, must be empty), ../shared/fixtures/metrics for B3 and B6, and
# Debian's prometheus binary for B6, Debian's chromium for B9.
# Output goes to stdout and to bench/_results/<name>.txt (ignored by git).
# Not here: B10 (bench/b10_real_plane.py) starts the real control plane (root, ../shared/k8s) and
# takes minutes; run it on its own. B5 and B8 need the [local] extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p bench/_results
for name in b1_api_list b2_reconcile b3_metrics b4_series b6_prometheus b7_usage_report b9_first_paint; do
  "$PY" "bench/$name.py" 2>&1 | grep -v '^NOTICE:' | tee "bench/_results/$name.txt"
done
