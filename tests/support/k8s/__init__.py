"""A Kubernetes API test server: kmock's emulator behind a fault-injecting proxy.

Layout, all on one background event loop::

    kubernetes client ──► FaultProxy (url) ──► PortalEmulator (direct_url)

- `emulator` — the object store and API emulation (`PortalEmulator`, `stamp_object`, the
  API server's `Status` answers);
- `faults` — the fault-injecting proxy (`FaultProxy`, `FaultPlan`, `HANG`, `DROP`);
- `server` — `K8sApiServer`, which runs both on a daemon thread, and the `k8s_api` fixture
  (registered in tests/conftest.py's `pytest_plugins`).
"""

from tests.support.k8s.emulator import PortalEmulator, stamp_object
from tests.support.k8s.faults import DROP, HANG, TRANSIENT_FAULTS, FaultPlan, FaultProxy
from tests.support.k8s.server import K8sApiServer

__all__ = [
    "DROP",
    "HANG",
    "TRANSIENT_FAULTS",
    "FaultPlan",
    "FaultProxy",
    "K8sApiServer",
    "PortalEmulator",
    "stamp_object",
]
