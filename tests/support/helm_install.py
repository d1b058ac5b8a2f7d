"""The portal installed on a real control plane as docs/install.md says: step 4's namespace and
Secrets with kubectl, step 5's `helm install` of charts/llm-portal as the cluster admin, then the
portal run in this process with the settings the release's ConfigMap holds and a token of the
ServiceAccount the release created (TokenRequest), so the chart's own RBAC is what it gets.

The binaries (kubectl 1.36.2, helm 3.22.0) are ../shared/k8s's, unpacked and checksummed by
tests.support.controlplane.binaries. Every command run is recorded on the `Install` (the test's
output names the install guide's lines it ran).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.support.chart import CHART, NAMESPACE, RELEASE
from tests.support.controlplane.binaries import binaries
from tests.support.controlplane.identity import token_kubeconfig
from tests.support.controlplane.install import _create_crds, _established
from tests.support.shared import PROJECT_ROOT, SHARED

if TYPE_CHECKING:
    from tests.support.controlplane.plane import ControlPlane

# The Gateway API and Kuadrant CRDs, read from ../shared (never copied into the project): no
# Gateway implementation or Kuadrant operator runs here, their APIs are served all the same.
ENDPOINT_CRDS = (
    "gateway.networking.k8s.io_gateways.yaml",
    "gateway.networking.k8s.io_httproutes.yaml",
    "kuadrant.io_authpolicies.yaml",
    "kuadrant.io_ratelimitpolicies.yaml",
    "kuadrant.io_tokenratelimitpolicies.yaml",
)
PUBLIC_URL = "https://llm.example.com"
# Settings the in-process live server keeps as the test runs it (plain HTTP on localhost, the
# test database and broker); every other setting of the release's ConfigMap is applied.
SERVER_SETTINGS = {
    "DEBUG",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "HTTPS",
    "TRUSTED_PROXY_COUNT",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "DB_CONN_MAX_AGE",
    "CELERY_VISIBILITY_TIMEOUT",
    "PLATFORM_ADMIN_PASSWORD_FILE",  # the Job's mount path; the test writes the Secret's value elsewhere
}


def values(*, admin: str, cpu_labels: dict[str, str]) -> dict[str, Any]:
    """The test's `values-prod.yaml` (docs/install.md step 5, plus step 8's gateway values): one
    replica of each part, the first platform admin from configuration, endpoint access on."""
    return {
        "image": {"repository": "ghcr.io/acme/llm-portal", "tag": "0.1.0"},
        "portal": {
            "allowedHosts": ["portal.acme.com"],
            "csrfTrustedOrigins": ["https://portal.acme.com"],
            "platformAdmin": {"username": admin, "email": f"{admin}@acme.com"},
        },
        "web": {"replicas": 1},
        "worker": {"replicas": 1},
        "rbac": {"readiness": {"enabled": True}},
        "kueue": {"cpuNodeLabels": cpu_labels},
        "gateway": {"api": True, "publicUrl": PUBLIC_URL},
    }


@dataclass
class Install:
    """One install: the plane, a work folder, and what was run (commands, in order)."""

    plane: ControlPlane
    folder: Path
    commands: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long `helm install` took
    timings: dict[str, float] = field(default_factory=dict)

    def _run(self, name: str, *args: str, display: str, cwd: Path | None = None) -> str:
        home = self.folder / "home"
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "KUBECONFIG": str(self.plane.kubeconfig),  # the cluster admin's
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        result = subprocess.run(
            [str(binaries((name,))[name]), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=cwd or self.folder,
            check=False,
        )
        self.commands.append(display)
        if result.returncode != 0:
            raise AssertionError(f"`{display}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def kubectl(self, *args: str) -> str:
        return self._run("kubectl", *args, display="kubectl " + " ".join(args))

    def helm(self, *args: str) -> str:
        """helm in the project's root (the guide's `charts/llm-portal` is relative to it)."""
        return self._run("helm", *args, display="helm " + " ".join(args), cwd=PROJECT_ROOT)

    # --- docs/install.md steps 4 and 5, read from the guide and run as written ---------------

    def secrets(self, *, database_url: str, broker_url: str, admin_password: str) -> None:
        """Step 4's kubectl lines, as the guide writes them: the namespace, its Pod Security label,
        the portal's Secrets from `portal-secrets.env` and the first admin's password from
        `admin-password.txt` (step 6.1), files this writes first in the folder the commands run in."""
        (self.folder / "portal-secrets.env").write_text(
            f"SECRET_KEY={os.urandom(40).hex()}\nDATABASE_URL={database_url}\n"
            f"CELERY_BROKER_URL={broker_url}\nCACHE_URL={broker_url}\n"
        )
        (self.folder / "admin-password.txt").write_text(admin_password)
        for line in guide_commands("kubectl "):
            self.kubectl(*shlex.split(line)[1:])

    def install(self, chart_values: dict[str, Any]) -> None:
        """Step 5's `helm install` line as written, in a folder holding its `values-prod.yaml` and
        the project's `charts/` (a link): the namespace exists from step 4. helm waits for the
        pre-install hook Job to complete before it applies the rest."""
        (self.folder / "values-prod.yaml").write_text(yaml.safe_dump(chart_values))
        link = self.folder / "charts"
        if not link.exists():
            link.symlink_to(CHART.parent, target_is_directory=True)
        (line,) = guide_commands("helm install ")
        self._run("helm", *shlex.split(line)[1:], display=line, cwd=self.folder)

    def status(self) -> dict[str, Any]:
        return json.loads(self.helm("status", RELEASE, "--namespace", NAMESPACE, "-o", "json"))

    def manifest(self) -> list[dict[str, Any]]:
        """The objects the release applied (`helm get manifest`), hooks excluded."""
        text = self.helm("get", "manifest", RELEASE, "--namespace", NAMESPACE)
        return [doc for doc in yaml.safe_load_all(text) if doc]

    # --- the portal, in process, as the release configures it --------------------------------

    def service_account_kubeconfig(self) -> Path:
        """A kubeconfig with a TokenRequest token of the ServiceAccount the release created."""
        (account,) = [d for d in self.manifest() if d["kind"] == "ServiceAccount"]
        return token_kubeconfig(self.plane, NAMESPACE, account["metadata"]["name"], self.folder / "portal.kubeconfig")

    def config_map(self) -> dict[str, str]:
        (config,) = [d for d in self.manifest() if d["kind"] == "ConfigMap"]
        name = config["metadata"]["name"]
        return self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}")["data"]

    def portal_settings(self) -> dict[str, Any]:
        """The settings Django loads from the installed ConfigMap (portal/settings.py run in a
        child process with that environment, as a pod would), those the live server keeps
        aside: name -> value."""
        data = self.config_map()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            **data,
            **dict(
                line.split("=", 1) for line in (self.folder / "portal-secrets.env").read_text().splitlines() if line
            ),
        }
        names = sorted(set(data) - SERVER_SETTINGS)
        probe = (
            "import django, json; django.setup(); from django.conf import settings as s; "
            f"print(json.dumps({{n: getattr(s, n) for n in {names!r} if hasattr(s, n)}}))"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout.splitlines()[-1])

    def admin_password_file(self) -> Path:
        """What the migrate Job's pod would find at /run/secrets/platform-admin/password: the
        Secret's `password`, as the cluster holds it."""
        import base64

        secret = self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/llm-portal-platform-admin")
        path = self.folder / "mounted-platform-admin-password"
        path.write_bytes(base64.b64decode(secret["data"]["password"]))
        return path


def install_endpoint_crds(plane: ControlPlane) -> None:
    """The Gateway API and Kuadrant CRDs of ../shared/schemas/crds (docs/install.md step 8.1-8.2)."""
    folder = SHARED / "schemas" / "crds"
    _established(plane, _create_crds(plane, [folder / name for name in ENDPOINT_CRDS]))


GUIDE = PROJECT_ROOT / "docs" / "install.md"


def guide_commands(prefix: str) -> list[str]:
    """The lines of docs/install.md's *Install on a cluster* code blocks that start with `prefix`
    (before the KServe section): the commands a platform engineer types in steps 4 and 5."""
    text = GUIDE.read_text()
    section = text[text.index("## Install on a cluster") : text.index("## KServe")]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith(prefix)]
