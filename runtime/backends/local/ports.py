"""Free TCP ports for local engines, safe across threads and worker processes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import socket
import time
from pathlib import Path

# Each engine's state file, `<root>/<deployment_id>/state.json`: the ports it lists stay taken.
STATE_FILE = "state.json"
# A freshly allocated port stays reserved this long even before its state file exists, which
# covers the gap between allocation and the engine binding it.
PORT_RESERVATION_SECONDS = 600.0


class PortAllocator:
    """Free TCP ports on 127.0.0.1 that no other local engine holds or is about to bind.

    The kernel's bind-to-0 finds a port free *now*; the lock file plus the reservation list
    (and every state file's ports) keep two workers, or two threads, from being handed the same
    port before either engine has bound it.
    """

    def __init__(self, root: Path):
        self.root = root
        self.lock_path = root / "ports.lock"
        self.reservations_path = root / "ports.json"

    @contextlib.contextmanager
    def _locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _reservations(self) -> dict[str, float]:
        try:
            stored = json.loads(self.reservations_path.read_text())
        except (OSError, ValueError):
            return {}
        cutoff = time.time() - PORT_RESERVATION_SECONDS
        return {port: at for port, at in stored.items() if at > cutoff}

    def _in_state_files(self) -> set[int]:
        ports: set[int] = set()
        for path in self.root.glob(f"*/{STATE_FILE}"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                ports.update(json.loads(path.read_text())["ports"])
        return ports

    def allocate(self, count: int = 1) -> list[int]:
        """`count` distinct ports, reserved until released or PORT_RESERVATION_SECONDS pass."""
        with self._locked():
            reservations = self._reservations()
            taken = {int(p) for p in reservations} | self._in_state_files()
            ports: list[int] = []
            while len(ports) < count:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind(("127.0.0.1", 0))
                    port = probe.getsockname()[1]
                if port not in taken:
                    taken.add(port)
                    ports.append(port)
            now = time.time()
            reservations.update({str(p): now for p in ports})
            self._write(reservations)
            return ports

    def release(self, ports: list[int]) -> None:
        with self._locked():
            reservations = self._reservations()
            for port in ports:
                reservations.pop(str(port), None)
            self._write(reservations)

    def _write(self, reservations: dict[str, float]) -> None:
        tmp = self.reservations_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(reservations))
        tmp.replace(self.reservations_path)
