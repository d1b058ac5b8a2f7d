"""The control plane's binaries: found through `KUBEBUILDER_ASSETS`, else unpacked once from
../shared/k8s/bin/*.xz into a per-user cache, each checked against ../shared/k8s/SHA256SUMS.

The versions live in `runtime.versions` (one place: the matrix in docs/install.md, the readiness
page and these tests read the same table). A contributor elsewhere builds the same binaries with the
commands in ../shared/k8s/BUILD.md and points `KUBEBUILDER_ASSETS` at the folder (envtest's
convention: a directory holding the binaries by name).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
from pathlib import Path

from tests.support.shared import SHARED

NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kueue",
    "kuberay-operator",
    "kserve-controller",
    "karpenter-kwok",
    "helm",
)
K8S_DIR = SHARED / "k8s"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-portal" / "k8s"


class Unavailable(Exception):
    """The binaries are not here: the caller skips (fails under CI) with this reason."""


def _sums() -> dict[str, str]:
    sums = {}
    for line in (K8S_DIR / "SHA256SUMS").read_text().splitlines():
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            sums[name.strip()] = digest
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _unpack(name: str, digest: str) -> Path:
    folder = CACHE / digest[:16]
    target = folder / name
    if target.exists():
        return target
    source = K8S_DIR / "bin" / f"{name}.xz"
    if not source.exists():
        raise Unavailable(f"{source} is absent")
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.{os.getpid()}.part"
    with lzma.open(source) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    found = _sha256(partial)
    if found != digest:
        partial.unlink()
        raise Unavailable(f"{name}: sha256 {found} does not match SHA256SUMS ({digest})")
    partial.chmod(0o755)
    partial.replace(target)  # atomic: a concurrent unpack of the same file is harmless
    return target


def binaries(names: tuple[str, ...] = NAMES) -> dict[str, Path]:
    """name -> executable path, or raise `Unavailable` with the reason."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        found = {name: Path(assets) / name for name in names}
        missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
        if missing:
            raise Unavailable(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
        return found
    if not (K8S_DIR / "SHA256SUMS").exists():
        raise Unavailable(
            f"{K8S_DIR} is absent: set KUBEBUILDER_ASSETS to a folder of the binaries "
            "built as ../shared/k8s/BUILD.md says"
        )
    sums = _sums()
    return {name: _unpack(name, sums[name]) for name in names}
