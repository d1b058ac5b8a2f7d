"""TCP ports for local engines: each deployment keeps its ports for its life (its endpoint URL is
what users copy), and no two engines are ever handed the same one, across threads and workers."""

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
# `<root>/ports-assigned.json`, {deployment id: its ports}: kept when the engine stops (the run
# directory goes, the endpoint URL stays), so a restart, a resume or a reboot binds the same ones.
ASSIGNMENTS_FILE = "ports-assigned.json"


def bindable(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port` now. With SO_REUSEADDR, as the engines' servers bind
    (vLLM's `create_server_socket`, asyncio's `create_server`): the connections of an engine just
    stopped, left in TIME_WAIT, do not make its port look taken; a listener of any kind does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Ports on 127.0.0.1 that no other local engine holds, is about to bind, or keeps for later.

    The kernel's bind-to-0 finds a port free *now*; the lock file plus the reservation list, every
    state file's ports and every deployment's assignment keep two workers, or two threads, from
    being handed the same port, and a stopped deployment's port from going to another engine.
    """

    def __init__(self, root: Path):
        self.root = root
        self.lock_path = root / "ports.lock"
        self.reservations_path = root / "ports.json"
        self.assignments_path = root / ASSIGNMENTS_FILE

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

    def _assignments(self) -> dict[str, list[int]]:
        try:
            stored = json.loads(self.assignments_path.read_text())
        except (OSError, ValueError):
            return {}
        return {
            owner: ports
            for owner, ports in (stored.items() if isinstance(stored, dict) else [])
            if isinstance(ports, list) and all(isinstance(port, int) for port in ports)
        }

    def _in_state_files(self, *, but: int | str | None = None) -> set[int]:
        ports: set[int] = set()
        for path in self.root.glob(f"*/{STATE_FILE}"):
            if path.parent.name != str(but):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    ports.update(json.loads(path.read_text())["ports"])
        return ports

    def _taken(self, *, but: int | str | None = None) -> set[int]:
        """Every port another engine (all but deployment `but`'s) holds, will bind or keeps."""
        assigned = {p for owner, ports in self._assignments().items() if owner != str(but) for p in ports}
        return {int(p) for p in self._reservations()} | self._in_state_files(but=but) | assigned

    @staticmethod
    def _pick(count: int, taken: set[int]) -> list[int]:
        ports: list[int] = []
        while len(ports) < count:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            if port not in taken:
                taken.add(port)
                ports.append(port)
        return ports

    def allocate(self, count: int = 1) -> list[int]:
        """`count` distinct ports, reserved until released or PORT_RESERVATION_SECONDS pass."""
        with self._locked():
            reservations = self._reservations()
            ports = self._pick(count, self._taken())
            now = time.time()
            reservations.update({str(p): now for p in ports})
            self._write(self.reservations_path, reservations)
            return ports

    def release(self, ports: list[int]) -> None:
        with self._locked():
            reservations = self._reservations()
            for port in ports:
                reservations.pop(str(port), None)
            self._write(self.reservations_path, reservations)

    def assign(
        self, deployment_id: int | str, count: int, *, previous: list[int] | None = None
    ) -> tuple[list[int], list[int] | None]:
        """The ports deployment `deployment_id`'s engine binds: the ones it was given at its first
        start (or, for an engine started before assignments were kept, the `previous` ones it ran
        on), unless another process listens on one now; then new ones, kept from here on.
        Returns (ports, the ports it had when they had to move, else None)."""
        with self._locked():
            assignments = self._assignments()
            had = list(assignments.get(str(deployment_id)) or previous or [])[:count]
            others = self._taken(but=deployment_id)
            ports = [port if port not in others and bindable(port) else 0 for port in had]
            # New ones for those taken (never one it had: that is the one another process holds).
            new = iter(self._pick(count - len(ports) + ports.count(0), others | set(had)))
            ports = [port or next(new) for port in ports] + list(new)  # positions kept: [serve, metrics]
            if assignments.get(str(deployment_id)) != ports:
                assignments[str(deployment_id)] = ports
                self._write(self.assignments_path, assignments)
            return ports, (had if ports[: len(had)] != had else None)

    def keep(self, owner: str, count: int = 1) -> list[int]:
        """The ports `owner` (the local gateway's "tenant-<slug>" or deployment id) was given, or
        new ones, kept from here on. Unlike `assign` it does not check that they are free: the
        gateway listening there is their rightful holder (it re-`assign`s them when it starts)."""
        with self._locked():
            assignments = self._assignments()
            if len(assignments.get(owner) or []) >= count:
                return assignments[owner][:count]
            assignments[owner] = self._pick(count, self._taken(but=owner))
            self._write(self.assignments_path, assignments)
            return assignments[owner]

    def _write(self, path: Path, data: dict) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
