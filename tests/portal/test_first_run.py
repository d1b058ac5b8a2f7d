"""What a new user meets first (issue 19): the portal's own error pages, audit codes in words,
times without microseconds, quiet logs for expected conditions, the favicon, compressed static
files with hashed names, and the quota-change form's current values. And scripts/demo itself
(issue 32): a line per step, pip's own progress, the URL only once the web server answers, and
Ctrl-C that says it is stopping and leaves no process behind."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.test import override_settings

from tests.support.shared import PROJECT_ROOT


class TestErrorPages:
    def test_404_and_403_are_the_portals_pages_with_navigation(self, world):
        client = world.browser("member")
        missing = client.get("/deployments/987654/")
        assert missing.status_code == 404
        page = missing.content.decode()
        assert "Page not found" in page and 'aria-label="Main"' in page and "/deployments/987654/" in page
        refused = client.get("/approvals/")
        assert refused.status_code == 403
        assert "Not allowed" in refused.content.decode() and 'aria-label="Main"' in refused.content.decode()

    def test_a_viewer_asking_for_the_request_form_is_told_why(self, world):
        refused = world.browser("viewer").get("/deployments/new/")
        assert refused.status_code == 403
        assert "viewers can look, not request" in refused.content.decode()

    def test_500_renders_without_a_request(self):
        from django.template import loader

        page = loader.get_template("500.html").render()
        assert "Something went wrong on our side" in page and "<html" in page

    def test_403_is_not_logged_with_a_traceback(self, world, caplog):
        with caplog.at_level(logging.INFO):
            world.browser("member").get("/approvals/")
        assert not [r for r in caplog.records if r.name.startswith("django.request")]


class TestQuietWithoutACluster:
    def test_the_kueue_sync_is_skipped_with_a_note_not_an_error(self, world, settings, caplog):
        from quotas.tasks import sync_kueue_task

        settings.KUBERNETES_URL, settings.KUBECONFIG = None, None
        with caplog.at_level(logging.INFO, logger="quotas.tasks"):
            assert sync_kueue_task.apply().get() == 0
        assert [r.levelname for r in caplog.records if r.name == "quotas.tasks"] == ["INFO"]


class TestWords:
    def test_audit_codes_read_as_words(self, world):
        from quotas import services

        services.quota_change_request_create(
            tenant=world.alpha,
            user=world.users["tenant_admin"],
            flavor=world.h100,
            nominal_gpus=10,
            borrowing_limit_gpus=4,
            lending_limit_gpus=None,
            justification="More traffic.",
        )
        page = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        assert "Quota change requested" in page and ">quota_change.request<" not in page

    @pytest.mark.parametrize(
        "raw, shown",
        [
            ("2026-12-01T04:31:07.123456Z", "2026-12-01 04:31:07 UTC"),
            ("2026-12-01T06:31:07+02:00", "2026-12-01 04:31:07 UTC"),
            ("not a time", "not a time"),
            (None, ""),
        ],
    )
    def test_times_are_shown_to_the_second_in_utc(self, raw, shown):
        from portal.templatetags.portal_tags import plain_time

        assert plain_time(raw) == shown

    def test_the_quota_form_carries_each_flavors_current_values(self, world):
        import json
        import re

        from quotas.models import TenantQuota

        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(borrowing_limit_gpus=8)
        page = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        current = json.loads(re.search(r'<script[^>]*\bid="current-quota"[^>]*>(.*?)</script>', page).group(1))
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        assert current[str(world.h100.pk)] == {
            "nominal_gpus": quota.nominal_gpus,
            "borrowing_limit_gpus": 8,
            "lending_limit_gpus": quota.lending_limit_gpus,
        }
        assert 'data-prefill="current-quota"' in page


class TestStatic:
    def test_favicon_ico_points_at_the_icon(self, client):
        response = client.get("/favicon.ico")
        assert response.status_code == 301 and response["Location"].endswith("portal/favicon.svg")

    def test_collectstatic_writes_hashed_and_compressed_files(self, tmp_path):
        """The storage the demo and production use: names carry a content hash, and a gzip copy
        sits beside each text file (WhiteNoise serves it to clients that accept gzip)."""
        from django.contrib.staticfiles.storage import staticfiles_storage
        from django.core.management import call_command
        from django.utils.functional import empty

        storages = {
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
        }
        with override_settings(STATIC_ROOT=tmp_path, STORAGES=storages):
            staticfiles_storage._wrapped = empty
            call_command("collectstatic", interactive=False, verbosity=0)
            url = staticfiles_storage.url("plotly/plotly.min.js")
        staticfiles_storage._wrapped = empty
        name = url.rsplit("/", 1)[1]
        assert name.startswith("plotly.min.") and name != "plotly.min.js"
        hashed = tmp_path / "plotly" / name
        compressed = hashed.with_name(name + ".gz")
        assert hashed.exists() and compressed.exists()
        assert compressed.stat().st_size < hashed.stat().st_size / 3


class TestDemo:
    def test_the_demo_runs_twice_and_shows_a_change_waiting_beside_what_serves(self, db):
        from io import StringIO

        from django.core.management import call_command

        from deployments.models import ModelDeployment

        for _ in range(2):  # idempotent: the second run adds nothing
            call_command("demo", stdout=StringIO())
        shown = {
            d.name: (d.state, d.serving_revision.number if d.serving_revision else None, d.proposed_number)
            for d in ModelDeployment.objects.all()
        }
        assert shown == {"llama3-70b-chat": ("approved", 1, 2), "qwen-7b-rerank": ("pending_approval", None, 1)}


# scripts/demo's own steps, run on stand-ins (no pip, no Django, no real server), so the test takes
# seconds: pip and manage.py answer at once, Celery sleeps, and the web server binds its port only
# after WEB_DELAY seconds, writing the time it did to `bound`. The real run is .ci/demo-smoke's.
STAND_IN_PYTHON = """#!/usr/bin/env bash
case "$1" in
  -m) if [ "$2" = pip ]; then
        echo "Collecting stand-in-package"
        echo "Requirement already satisfied: already-there"
        exit 0
      fi ;;
  manage.py) echo "manage.py $2"; exit 0 ;;
esac
exec {python} "$@"
"""
STAND_IN_CELERY = """#!/usr/bin/env bash
echo "$$" >>"$STAND_IN_PIDS"
exec sleep 600
"""
STAND_IN_GUNICORN = """#!{python}
import os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

with open(os.environ["STAND_IN_PIDS"], "a") as pids:
    print(os.getpid(), file=pids)
if os.environ.get("WEB_FAILS"):
    sys.exit("stand-in web server: cannot bind")
time.sleep(float(os.environ["WEB_DELAY"]))


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()


host, port = sys.argv[sys.argv.index("--bind") + 1].split(":")
server = HTTPServer((host, int(port)), Health)
with open(os.environ["STAND_IN_BOUND"], "w") as bound:
    print(time.time(), file=bound)
server.serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """Running (not a zombie waiting for its parent to read it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _in_session(sid: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry))
    return found


class DemoRun:
    """scripts/demo copied into an empty tree whose .venv/bin holds the stand-ins, started in a
    session of its own as a terminal would (Ctrl-C signals its whole process group)."""

    def __init__(self, root, **env):
        (root / "scripts").mkdir()
        shutil.copy(PROJECT_ROOT / "scripts" / "demo", root / "scripts" / "demo")
        bin_dir = root / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        for name, text in (("python", STAND_IN_PYTHON), ("celery", STAND_IN_CELERY), ("gunicorn", STAND_IN_GUNICORN)):
            (bin_dir / name).write_text(text.replace("{python}", sys.executable))
            (bin_dir / name).chmod(0o755)
        self.root, self.pids, self.bound = root, root / "pids", root / "bound"
        self.port = _free_port()
        run_env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "PORT": str(self.port),
            "STAND_IN_PIDS": str(self.pids),
            "STAND_IN_BOUND": str(self.bound),
            "WEB_DELAY": "3",  # longer than the fixed 2 s the script once slept before its banner
            **env,
        }
        self.proc = subprocess.Popen(
            ["bash", str(root / "scripts" / "demo")],
            cwd=root,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.started = time.time()
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, fragment: str, timeout: float = 30) -> float:
        """When the line holding `fragment` was printed."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for when, line in list(self.lines):
                if fragment in line:
                    return when
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"{fragment!r} never printed; the output:\n{self.text()}")

    def finish(self, timeout: float = 30) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def started_pids(self) -> list[int]:
        return [int(pid) for pid in self.pids.read_text().split()]

    def kill_leftovers(self):
        for pid in _in_session(self.proc.pid) + (self.started_pids() if self.pids.exists() else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def demo_run(tmp_path):
    runs = []

    def start(**env) -> DemoRun:
        runs.append(DemoRun(tmp_path, **env))
        return runs[-1]

    yield start
    for run in runs:  # a failed assertion leaves nothing running behind it
        run.kill_leftovers()
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


class TestDemoScript:
    def test_it_says_what_it_does_and_prints_the_url_only_once_the_server_answers(self, demo_run):
        run = demo_run()
        url_at = run.wait_for("Portal running at")
        assert run.bound.exists(), "the URL was printed before the web server listened"
        assert float(run.bound.read_text()) <= url_at
        assert url_at - run.started >= 3
        steps = [line for _, line in run.lines if line.startswith("==> ")]
        assert steps == [
            "==> Installing the portal and its packages into .venv (the first run downloads them: a few minutes)",
            "==> Migrating the database",
            "==> Collecting the static files",
            "==> Loading the demo data",
            "==> Starting the web server, a Celery worker and Celery beat (logs in var/logs/)",
        ]
        # pip's own lines show, less those about what is already installed; the log keeps them all.
        assert "    Collecting stand-in-package" in run.text() and "already-there" not in run.text()
        assert "Requirement already satisfied: already-there" in (run.root / "var/logs/pip.log").read_text()
        assert f"Portal running at http://127.0.0.1:{run.port}/" in run.text()

        # Ctrl-C: the terminal signals the whole process group.
        os.killpg(run.proc.pid, signal.SIGINT)
        assert run.finish() == 130
        assert run.text().index("Stopping the portal…") > run.text().index("Portal running at")
        assert run.text().splitlines()[-1] == "Stopped."
        started = run.started_pids()
        assert len(started) >= 3 and not [pid for pid in started if _alive(pid)]
        assert _in_session(run.proc.pid) == []

    def test_sigterm_to_the_script_alone_stops_what_it_started(self, demo_run):
        run = demo_run(WEB_DELAY="0")
        run.wait_for("Portal running at")
        os.kill(run.proc.pid, signal.SIGTERM)  # its children get no signal but the script's
        assert run.finish() == 143
        assert "Stopping the portal…" in run.text()
        assert not [pid for pid in run.started_pids() if _alive(pid)]
        assert _in_session(run.proc.pid) == []

    def test_a_web_server_that_dies_is_reported_not_announced(self, demo_run):
        run = demo_run(WEB_FAILS="1")
        assert run.finish() == 1
        assert "A process of the portal exited while it started" in run.text()
        assert "cannot bind" in run.text()  # the tail of its log
        assert "Portal running at" not in run.text()
        assert not [pid for pid in run.started_pids() if _alive(pid)]
        assert _in_session(run.proc.pid) == []
