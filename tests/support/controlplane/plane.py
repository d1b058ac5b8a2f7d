"""`ControlPlane`: etcd, kube-apiserver, controller manager, scheduler, KWOK, Kueue, KubeRay
(and KServe and Karpenter's KWOK provider, karpenter.py, on request) started from
../shared/k8s's binaries with the flags its README records, in a temporary folder, on free
ports, with a pod network namespace and a stand-in Ray head.

Everything it creates outside its folder (the network namespace, its route and veth, Kueue's
fixed certificate paths) is written to `state.json` first, so `sweep_stale()` removes what a
crashed run left (the processes themselves die with their parent: see procs.py). That record
lies in a folder of its own under RUNS even when the caller names the work folder (`folder=`,
as `scripts/cluster` does with var/cluster), so a test session and a developer's cluster see
each other: neither removes Kueue's fixed certificates while the other runs. A named folder is
the caller's: `stop()` leaves it (logs, kubeconfigs) and removes only the record.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import tempfile
import urllib.request
from pathlib import Path

import yaml

from tests.support.controlplane import network
from tests.support.controlplane.binaries import K8S_DIR, binaries
from tests.support.controlplane.install import install_crds, install_kueue_webhooks, install_visibility
from tests.support.controlplane.pki import write_pki
from tests.support.controlplane.procs import Proc, wait_until
from tests.support.processes import free_port
from tests.support.shared import PROJECT_ROOT, SHARED

RUNS = Path(tempfile.gettempdir()) / "llm-portal-controlplane"
# Kueue exits unless these exist when its internal certificate management is off (paths fixed in
# its code: kubernetes-sigs/kueue v0.19.2 cmd/kueue/main.go); any valid pair works.
KUEUE_FIXED_CERTS = (Path("/etc/kueue/metrics/certs"), Path("/visibility"))
KSERVE_FIXED_CERTS = Path("/tmp/k8s-webhook-server/serving-certs")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove what runs whose owner process is gone left behind; returns their folders."""
    removed = []
    if not RUNS.exists():
        return removed
    for folder in RUNS.iterdir():
        state_file = folder / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        if _alive(state["owner"]):
            continue
        _undo(state)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


def _live_runs() -> int:
    count = 0
    for folder in RUNS.iterdir() if RUNS.exists() else ():
        try:
            count += _alive(json.loads((folder / "state.json").read_text())["owner"])
        except (OSError, ValueError, KeyError):
            pass
    return count


def _undo(state: dict, *, live_self: bool = False) -> None:
    """Remove the network and, when no other run is alive, the fixed certificate paths this run
    created (`live_self`: the caller is the run itself, so it is among the live ones)."""
    if net := state.get("network"):
        network.remove(net["netns"], net["host_if"], net["pod_cidr"])
    if _live_runs() <= int(live_self):  # no other run uses the fixed certificate paths
        for path in state.get("created_paths", []):
            shutil.rmtree(path, ignore_errors=True)


class ControlPlane:
    """One control plane. `start()`, use `kubeconfig` / `admin_token`, `stop()`."""

    def __init__(self, *, kserve: bool = False, karpenter: bool = False, folder: Path | None = None) -> None:
        self.kserve = kserve
        self.karpenter = karpenter
        self.bin = binaries()  # raises Unavailable before anything is made
        RUNS.mkdir(parents=True, exist_ok=True)
        self.run = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=RUNS))  # state.json
        self.dir = folder or self.run
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}
        self.state = {"owner": os.getpid(), "created_paths": []}
        self.admin_token = secrets.token_hex(16)
        self.net: network.PodNetwork | None = None
        self.ports = {name: free_port() for name in ("etcd", "peer", "api", "webhook", "visibility", "kserve_wh")}
        self.ports |= {name: free_port() for name in ("kueue_health", "kueue_metrics", "ray_metrics", "ray_health")}
        self.ports |= {name: free_port() for name in ("kcm", "sched", "kserve_metrics", "kserve_health")}
        self.ports |= {name: free_port() for name in ("karpenter_metrics", "karpenter_health")}

    # --- paths -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['api']}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def ca(self) -> Path:
        return self.dir / "pki" / "ca.crt"

    def _save(self) -> None:
        (self.run / "state.json").write_text(json.dumps(self.state))

    def _proc(self, name: str, argv: list[str], env: dict | None = None, prefix: list[str] | None = None) -> Proc:
        proc = Proc(name, [*(prefix or []), *argv], self.dir / f"{name}.log", env).start()
        self.procs[name] = proc
        return proc

    # --- HTTP to the API server ---------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None, *, token: str | None = None) -> dict:
        context = ssl.create_default_context(cafile=str(self.ca))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw[:1] in (b"{", b"[") else {"raw": raw.decode(errors="replace")}

    def kubectl(self, *args: str, input: str | None = None) -> str:  # noqa: A002
        import subprocess

        result = subprocess.run(
            [str(self.bin["kubectl"]), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    # --- start / stop ------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self._save()
        pki = self.dir / "pki"
        write_pki(pki)
        (self.dir / "tokens.csv").write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        self._write_kubeconfig()
        self.net = network.PodNetwork.create(f"{os.getpid() % 100000}{len(os.listdir(RUNS)) % 10}")
        self.state["network"] = {"netns": self.net.netns, "host_if": self.net.host_if, "pod_cidr": self.net.pod_cidr}
        self._save()
        p = self.ports
        etcd = self._proc(
            "etcd",
            [
                str(self.bin["etcd"]),
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{p['peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p['peer']}",
                f"--initial-cluster=default=http://127.0.0.1:{p['peer']}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        wait_until(lambda: _http_ok(f"http://127.0.0.1:{p['etcd']}/health"), timeout=30, what="etcd", procs=[etcd])
        api = self._proc(
            "kube-apiserver",
            [
                str(self.bin["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--secure-port={p['api']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--token-auth-file={self.dir / 'tokens.csv'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--service-account-issuer=https://127.0.0.1:{p['api']}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            ],
        )
        wait_until(lambda: self.request("GET", "/readyz").get("raw") == "ok", timeout=60, what="/readyz", procs=[api])
        kubeconfig = str(self.kubeconfig)
        common = [f"--kubeconfig={kubeconfig}", "--bind-address=127.0.0.1"]
        auth = [f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
        self._proc(
            "kube-controller-manager",
            [
                str(self.bin["kube-controller-manager"]),
                *common,
                *auth,
                "--leader-elect=false",
                f"--secure-port={p['kcm']}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
            ],
        )
        self._proc(
            "kube-scheduler",
            [str(self.bin["kube-scheduler"]), *common, *auth, "--leader-elect=false", f"--secure-port={p['sched']}"],
        )
        self._proc(
            "kwok",
            [
                str(self.bin["kwok"]),
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--config={K8S_DIR / 'manifests' / 'kwok' / 'stages.yaml'}",
                f"--cidr={self.net.kwok_cidr}",
                "--node-lease-duration-seconds=40",
            ],
        )
        install_crds(self, kserve=self.kserve)
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": "kueue-system"}})
        install_kueue_webhooks(self)
        self._start_kueue()
        install_visibility(self)
        self._start_kuberay()
        if self.kserve:
            self._start_kserve()
        if self.karpenter:
            self.start_karpenter()
        self._start_rayhead()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "portal-test", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}
            ],
            "users": [{"name": "admin", "user": {"token": self.admin_token}}],
            "contexts": [{"name": "admin", "context": {"cluster": "portal-test", "user": "admin"}}],
            "current-context": "admin",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _fixed_certs(self, folder: Path) -> None:
        if (folder / "tls.crt").exists() and (folder / "tls.key").exists():
            return
        folder.mkdir(parents=True, exist_ok=True)
        self.state["created_paths"].append(str(folder))
        self._save()
        shutil.copy(self.dir / "pki" / "webhook.crt", folder / "tls.crt")
        shutil.copy(self.dir / "pki" / "webhook.key", folder / "tls.key")

    def kueue_config(self, **overrides) -> dict:
        p = self.ports
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p['kueue_health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{p['kueue_metrics']}"},
            "webhook": {"host": "127.0.0.1", "port": p["webhook"], "certDir": str(self.dir / "webhook-certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": p["visibility"]},
            "integrations": {"frameworks": ["ray.io/rayservice", "ray.io/raycluster"]},
        }
        if self.kserve:
            config["integrations"]["frameworks"] += ["pod", "deployment"]
            config["managedJobsNamespaceSelector"] = {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "kueue-system", "kserve"],
                    }
                ]
            }
        config.update(overrides)
        return config

    def _start_kueue(self) -> None:
        for folder in KUEUE_FIXED_CERTS:
            self._fixed_certs(folder)
        certs = self.dir / "webhook-certs"
        certs.mkdir(exist_ok=True)
        shutil.copy(self.dir / "pki" / "webhook.crt", certs / "tls.crt")
        shutil.copy(self.dir / "pki" / "webhook.key", certs / "tls.key")
        (self.dir / "kueue.yaml").write_text(yaml.safe_dump(self.kueue_config()))
        self.start_kueue()

    def start_kueue(self) -> None:
        """(Re)start Kueue; waits for its health port. After `stop_kueue()`, tests call this."""
        proc = self._proc(
            "kueue", [str(self.bin["kueue"]), f"--config={self.dir / 'kueue.yaml'}", f"--kubeconfig={self.kubeconfig}"]
        )
        wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{self.ports['kueue_health']}/readyz"),
            timeout=60,
            what="kueue",
            procs=[proc],
        )

    def stop_kueue(self) -> None:
        self.procs["kueue"].stop()

    def start_karpenter(self) -> None:
        """Start Karpenter with its KWOK provider (karpenter.py); a plane started without it may
        add it later, and `stop_karpenter()` stops it again (its CRDs and node class stay)."""
        from tests.support.controlplane.karpenter import start_karpenter

        start_karpenter(self)

    def stop_karpenter(self) -> None:
        if "karpenter" in self.procs:
            self.procs.pop("karpenter").stop(timeout=10)

    def _start_kuberay(self) -> None:
        p = self.ports
        proc = self._proc(
            "kuberay",
            [
                str(self.bin["kuberay-operator"]),
                f"--kubeconfig={self.kubeconfig}",
                "--enable-leader-election=false",
                f"--metrics-addr=127.0.0.1:{p['ray_metrics']}",
                f"--health-probe-bind-address=127.0.0.1:{p['ray_health']}",
                "--use-kubernetes-proxy",
                "--log-stdout-encoder=console",
            ],
        )
        wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{p['ray_health']}/readyz"), timeout=60, what="kuberay", procs=[proc]
        )

    def _start_kserve(self) -> None:
        from tests.support.controlplane.install import install_kserve

        self._fixed_certs(KSERVE_FIXED_CERTS)
        install_kserve(self)
        p = self.ports
        proc = self._proc(
            "kserve",
            [
                str(self.bin["kserve-controller"]),
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-addr=127.0.0.1:{p['kserve_metrics']}",
                f"--health-probe-addr=127.0.0.1:{p['kserve_health']}",
                f"--webhook-port={p['kserve_wh']}",
            ],
            env={"POD_NAMESPACE": "kserve"},
        )
        wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{p['kserve_health']}/readyz"), timeout=60, what="kserve", procs=[proc]
        )

    def _start_rayhead(self) -> None:
        import sys

        metrics = SHARED / "fixtures" / "metrics" / "ray-serve-llm-vllm-0.32-cpu.prom"
        proc = self._proc(
            "rayhead",
            [sys.executable, "-m", "tests.support.controlplane.rayhead", str(metrics)],
            env={"PYTHONPATH": str(PROJECT_ROOT), "PYTHONUNBUFFERED": "1"},
            prefix=self.net.exec_argv([]),
        )
        wait_until(lambda: "ready" in proc.log.read_text(), timeout=30, what="the stand-in Ray head", procs=[proc])

    def stop(self) -> None:
        # Karpenter before kwok and the API server: it deletes the nodes it made through them.
        order = [
            "rayhead",
            "karpenter",
            "kserve",
            "kuberay",
            "kueue",
            "kwok",
            "kube-scheduler",
            "kube-controller-manager",
        ]
        for name in order:
            if name in self.procs:
                self.procs[name].stop(timeout=10)
        for name in ("kube-apiserver", "etcd"):
            if name in self.procs:
                self.procs[name].stop(timeout=20)
        _undo(self.state, live_self=True)
        self.state["network"] = None
        if self.dir != self.run:  # the caller's folder: only the record goes
            shutil.rmtree(self.run, ignore_errors=True)
        elif not os.environ.get("CONTROLPLANE_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
