"""A network namespace that owns the pod range, so the API server's proxy reaches "pods".

The API server refuses to proxy to loopback and link-local addresses, so a Ray head's dashboard
must answer on a pod IP. The pods' range is routed into a namespace this run creates, where it
is a `local` route: one server bound to 0.0.0.0 there answers for every pod IP, and the socket's
local address says which pod was asked (../shared/k8s/README.md, "Ray heads"). Each run takes its
own /16 and /30 so concurrent runs (a developer's cluster beside a test session) do not collide.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _used_prefixes() -> set[str]:
    routes = _ip("route", "show").stdout + _ip("-4", "addr", "show").stdout
    return {word for word in routes.split() if word[:1].isdigit() and "/" in word} | {
        word.split("/")[0] for word in routes.split() if word[:1].isdigit()
    }


@dataclass
class PodNetwork:
    index: int
    netns: str
    host_if: str
    pod_cidr: str  # the /16 routed into the namespace
    host_addr: str
    ns_addr: str

    @property
    def kwok_cidr(self) -> str:
        """Pods on nodes without a podCIDR (Karpenter's) take addresses from here."""
        net = ipaddress.ip_network(self.pod_cidr)
        return f"{net[250 * 256]}/23"

    def node_cidr(self, n: int) -> str:
        """A /26 per KWOK node: 1,000 nodes fit below kwok's range."""
        if n >= 1000:
            raise ValueError("at most 1000 nodes")
        net = ipaddress.ip_network(self.pod_cidr)
        return f"{net[n * 64]}/26"

    @classmethod
    def create(cls, tag: str) -> PodNetwork:
        used = _used_prefixes()
        for index in range(50):
            pod_cidr = f"10.{200 + index}.0.0/16"
            host_addr = f"10.243.{index}.1"
            if pod_cidr not in used and host_addr not in used:
                break
        else:
            raise RuntimeError("no free pod range among 10.200.0.0/16 … 10.249.0.0/16")
        net = cls(index, f"lp-{tag}", f"lph{tag}"[:15], pod_cidr, host_addr, f"10.243.{index}.2")
        peer = f"lpp{tag}"[:15]
        try:
            _ip("netns", "add", net.netns)
            _ip("link", "add", net.host_if, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", net.netns)
            _ip("addr", "add", f"{net.host_addr}/30", "dev", net.host_if)
            _ip("link", "set", net.host_if, "up")
            inside = ["netns", "exec", net.netns, "ip"]
            _ip(*inside, "addr", "add", f"{net.ns_addr}/30", "dev", peer)
            _ip(*inside, "link", "set", peer, "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "route", "add", "local", net.pod_cidr, "dev", "lo")
            _ip(*inside, "route", "add", "default", "via", net.host_addr)
            _ip("route", "add", net.pod_cidr, "via", net.ns_addr)
        except subprocess.CalledProcessError as error:
            net.remove()
            raise RuntimeError(f"creating the pod network failed: {error.stderr.strip()}") from error
        return net

    def exec_argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def remove(self) -> None:
        remove(self.netns, self.host_if, self.pod_cidr)


def remove(netns: str, host_if: str, pod_cidr: str) -> None:
    """Idempotent: also used to clean up after a run that crashed."""
    _ip("route", "del", pod_cidr, check=False)
    _ip("link", "del", host_if, check=False)  # removes the peer too
    _ip("netns", "del", netns, check=False)
