"""docker-compose.yml, the Dockerfile and deploy/env.example, checked without a Docker engine.

There is no Docker engine on the development machines, so these tests read the files: which
services exist, how they are wired (database and broker URLs point at the compose services,
start order follows health and the migration), and that every variable the files set is one
the portal actually reads, so a typo cannot silently leave a setting at its default.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENV_EXAMPLE = ROOT / "deploy" / "env.example"
SETTINGS = ROOT / "portal" / "settings.py"

PORTAL_SERVICES = ("migrate", "web", "worker", "beat")
LONG_RUNNING = ("web", "worker", "beat")

# env_str("NAME"…), env_url(\n "NAME"…): every helper in portal.env takes the name first.
_SETTINGS_READ = re.compile(r"\benv_[a-z]+\(\s*\"([A-Z][A-Z0-9_]*)\"")
_ENV_LINE = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")
_INTERPOLATION = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def settings_env_names() -> set[str]:
    """Every environment variable portal/settings*.py read through the portal.env helpers."""
    return {name for path in SETTINGS.parent.glob("settings*.py") for name in _SETTINGS_READ.findall(path.read_text())}


def env_example() -> tuple[dict[str, str], set[str]]:
    """(variables set, variables only documented in comments) in deploy/env.example."""
    values: dict[str, str] = {}
    documented: set[str] = set()
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = _ENV_LINE.match(line.strip())
        if match is None:
            continue
        commented, name, value = match.groups()
        if commented:
            documented.add(name)
        else:
            values[name] = value
    return values, documented


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` against `env`."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match.groups()
        if env.get(name):
            return env[name]
        if op in (":?", "?"):
            raise AssertionError(f"{name} is required: {arg}")
        return arg or ""

    return _INTERPOLATION.sub(substitute, text.replace("$$", "\0")).replace("\0", "$")


def compose_interpolated_names() -> set[str]:
    """Variables docker-compose.yml takes from .env by interpolation (`${NAME…}`)."""
    return {match[0] for match in _INTERPOLATION.findall(COMPOSE.read_text())}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as `docker compose` sees it with .env copied from env.example."""
    values, _ = env_example()
    return yaml.safe_load(interpolate(COMPOSE.read_text(), values))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def test_settings_scan_sees_the_variables_it_must() -> None:
    # Guards the regex: multi-line calls and every helper kind are found.
    names = settings_env_names()
    assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "OIDC_RP_CLIENT_ID"} <= names
    assert "CELERY_VISIBILITY_TIMEOUT" in names


class TestServices:
    def test_the_services(self, services: dict[str, Any]) -> None:
        assert set(services) == {"db", "redis", "migrate", "web", "worker", "beat", "prometheus"}

    def test_database_and_broker_images_and_volumes(self, compose: dict[str, Any]) -> None:
        services = compose["services"]
        assert services["db"]["image"] == "postgres:16"
        assert services["redis"]["image"] == "redis:7"
        assert "db-data:/var/lib/postgresql/data" in services["db"]["volumes"]
        assert "redis-data:/data" in services["redis"]["volumes"]
        assert {"db-data", "redis-data"} <= set(compose["volumes"])

    @pytest.mark.parametrize("name", PORTAL_SERVICES)
    def test_portal_services_run_the_one_image_built_here(self, services: dict[str, Any], name: str) -> None:
        service = services[name]
        assert service["image"] == services["web"]["image"]
        assert service["build"]["context"] == "."
        assert (ROOT / service["build"].get("dockerfile", "Dockerfile")).is_file()

    @pytest.mark.parametrize(
        ("name", "command"),
        [
            ("migrate", ["python", "manage.py", "migrate", "--noinput"]),
            ("web", ["gunicorn", "portal.wsgi:application"]),
            ("worker", ["celery", "-A", "portal", "worker"]),
            ("beat", ["celery", "-A", "portal", "beat"]),
        ],
    )
    def test_commands(self, services: dict[str, Any], name: str, command: list[str]) -> None:
        assert services[name]["command"][: len(command)] == command

    def test_web_publishes_the_port_gunicorn_binds(self, services: dict[str, Any]) -> None:
        web = services["web"]
        bind = web["command"][web["command"].index("--bind") + 1]
        (published,) = web["ports"]
        assert published.rsplit(":", 1)[1] == bind.rsplit(":", 1)[1] == "8000"

    def test_migration_is_a_one_shot(self, services: dict[str, Any]) -> None:
        # A restart policy would rerun it forever and never count as completed.
        assert services["migrate"]["restart"] == "no"

    def test_one_beat_only(self, services: dict[str, Any]) -> None:
        beat = services["beat"]
        assert beat.get("deploy", {}).get("replicas", 1) == 1
        assert "scale" not in beat


class TestEnvironment:
    @pytest.mark.parametrize("name", PORTAL_SERVICES)
    def test_database_and_broker_point_at_the_compose_services(self, services: dict[str, Any], name: str) -> None:
        env = environment(services[name])
        db_env = environment(services["db"])
        database = urlparse(env["DATABASE_URL"])
        assert (database.scheme, database.hostname, database.port) == ("postgres", "db", 5432)
        assert database.path == f"/{db_env['POSTGRES_DB']}"
        assert database.username == db_env["POSTGRES_USER"]
        # The same variable supplies both sides of the password.
        assert database.password == db_env["POSTGRES_PASSWORD"]
        broker = urlparse(env["CELERY_BROKER_URL"])
        assert (broker.scheme, broker.hostname) == ("redis", "redis")
        assert urlparse(env["CACHE_URL"]).hostname == "redis"

    @pytest.mark.parametrize("name", PORTAL_SERVICES)
    def test_portal_services_read_the_env_file(self, services: dict[str, Any], name: str) -> None:
        assert services[name]["env_file"] == [".env"]

    @pytest.mark.parametrize("name", PORTAL_SERVICES)
    def test_every_variable_compose_sets_is_read_by_settings(self, services: dict[str, Any], name: str) -> None:
        unknown = set(environment(services[name])) - settings_env_names()
        assert not unknown, f"{name} sets variables portal/settings.py never reads: {unknown}"

    def test_every_variable_in_env_example_is_read_by_settings_or_compose(self) -> None:
        values, documented = env_example()
        compose_names = compose_interpolated_names()
        unknown = (set(values) | documented) - settings_env_names() - compose_names
        assert not unknown, f"deploy/env.example has variables nothing reads: {unknown}"

    def test_every_variable_compose_interpolates_is_documented(self) -> None:
        values, documented = env_example()
        missing = compose_interpolated_names() - set(values) - documented
        assert not missing, f"docker-compose.yml uses undocumented variables: {missing}"

    def test_settings_accept_the_example_environment(self, services: dict[str, Any]) -> None:
        """Import the real settings with exactly what the web container would get."""
        values, _ = env_example()
        env = {**values, **environment(services["web"]), "PATH": os.environ.get("PATH", "")}
        script = (
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.DATABASES['default']['HOST'], s.CELERY_BROKER_URL, s.DEBUG, "
            "'localhost' in s.ALLOWED_HOSTS)"
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["db", "redis://redis:6379/0", "False", "True"]


class TestHealthAndOrder:
    @pytest.mark.parametrize("name", LONG_RUNNING)
    def test_long_running_services_wait_for_migration_and_healthy_dependencies(
        self, services: dict[str, Any], name: str
    ) -> None:
        assert services[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"},
            "db": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }

    def test_migration_waits_for_a_healthy_database(self, services: dict[str, Any]) -> None:
        assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}

    def test_every_service_waited_on_for_health_has_a_healthcheck(self, services: dict[str, Any]) -> None:
        for service in services.values():
            for dependency, rule in (service.get("depends_on") or {}).items():
                if rule.get("condition") == "service_healthy":
                    check = services[dependency].get("healthcheck") or {}
                    assert check.get("test") and not check.get("disable"), dependency

    def test_database_and_broker_health_commands(self, services: dict[str, Any]) -> None:
        assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
        assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]

    def test_web_health_check_uses_healthz_with_an_allowed_host(self, services: dict[str, Any]) -> None:
        check = " ".join(services["web"]["healthcheck"]["test"])
        assert "/healthz" in check
        host = re.search(r"'Host': '([^']+)'", check)
        assert host is not None, "without a Host header Django may answer 400"
        values, _ = env_example()
        assert host.group(1) in values["ALLOWED_HOSTS"].split(",")

    def test_worker_health_check_pings_this_worker(self, services: dict[str, Any]) -> None:
        # `$$` in the file is compose's escape for a `$` the container's shell expands.
        check = " ".join(services["worker"]["healthcheck"]["test"])
        assert "inspect ping" in check and "celery@$HOSTNAME" in check

    def test_beat_does_not_inherit_the_web_health_check(self, services: dict[str, Any]) -> None:
        # The image's HEALTHCHECK probes HTTP, which beat does not serve.
        assert services["beat"]["healthcheck"] == {"disable": True}


class TestPrometheus:
    def test_prometheus_is_optional_and_scrapes_the_portal(self, services: dict[str, Any]) -> None:
        prometheus = services["prometheus"]
        assert prometheus["profiles"] == ["monitoring"]
        mount = next(v for v in prometheus["volumes"] if v.endswith(":ro"))
        source, target, _ = mount.split(":")
        assert target == "/etc/prometheus/prometheus.yml"
        config = yaml.safe_load((ROOT / source).read_text())
        (job,) = config["scrape_configs"]
        assert job["metrics_path"] == "/metrics"
        assert job["static_configs"] == [{"targets": ["web:8000"]}]

    def test_the_scraped_host_is_allowed(self) -> None:
        values, _ = env_example()
        assert "web" in values["ALLOWED_HOSTS"].split(",")
        assert values["HTTPS"] == "false", "HTTPS would redirect the plain-HTTP scrape"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


class TestDockerfile:
    def stages(self, lines: list[str]) -> list[list[str]]:
        stages: list[list[str]] = []
        for line in lines:
            if line.upper().startswith("FROM "):
                stages.append([])
            if stages:
                stages[-1].append(line)
        return stages

    def test_multi_stage_with_a_builder(self, lines: list[str]) -> None:
        froms = [line for line in lines if line.upper().startswith("FROM ")]
        assert len(froms) >= 2
        assert re.search(r"\bAS builder\b", froms[0], re.IGNORECASE)
        final = self.stages(lines)[-1]
        assert any(line.startswith("COPY --from=builder") for line in final)

    def test_runtime_stage_runs_as_uid_10001(self, lines: list[str]) -> None:
        final = self.stages(lines)[-1]
        users = [line.split()[1] for line in final if line.startswith("USER ")]
        # Numeric, so that Kubernetes' runAsNonRoot can verify it.
        assert users and users[-1].split(":")[0] == "10001"
        assert any("--uid 10001" in line for line in final)

    def test_builder_tools_stay_out_of_the_runtime_stage(self, lines: list[str]) -> None:
        final = " ".join(self.stages(lines)[-1])
        assert "pip wheel" not in final and "build-essential" not in final

    def test_static_files_are_collected_with_a_build_only_secret(self, lines: list[str]) -> None:
        collect = next(line for line in lines if "collectstatic" in line)
        assert collect.startswith("RUN ") and "SECRET_KEY=" in collect
        assert not any(re.match(r"(ENV|ARG)\s+SECRET_KEY", line) for line in lines)

    def test_the_local_extra_is_not_installed(self, lines: list[str]) -> None:
        text = " ".join(lines)
        assert "[local]" not in text and "vllm" not in text.lower()
        assert "['project']['dependencies']" in text

    def test_health_check_and_default_command(self, lines: list[str]) -> None:
        health = next(line for line in lines if line.startswith("HEALTHCHECK"))
        assert "/healthz" in health
        cmd = next(line for line in lines if line.startswith("CMD "))
        assert "gunicorn" in cmd and "portal.wsgi:application" in cmd

    def test_dockerignore_keeps_secrets_and_local_state_out(self) -> None:
        ignored = {line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip()}
        assert {".env", ".venv", ".git", "var", "tests"} <= ignored
