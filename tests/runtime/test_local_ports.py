"""A local deployment's endpoint URL stays for its life: its port is given at the first start and
kept (runtime.backends.local.ports), through a new revision, a stop and resume, a reboot and the
upgrade from engines that ran before ports were kept; it moves only when another process listens
there at start, and then the event and the endpoint URL say so. Real stand-in engine processes."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path

import pytest

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.ports import ASSIGNMENTS_FILE, PortAllocator
from runtime.backends.local.processes import process_alive, terminate_session
from tests.runtime.test_local import StandInEngine, gone, make_spec
from tests.support.processes import wait_for


@pytest.fixture
def backend(tmp_path):
    """A local backend running stand-in engines; whatever it left running is stopped afterwards."""
    made = LocalBackend(tmp_path / "runtime", engine=StandInEngine(), stop_timeout=5, model_root=Path("/models"))
    yield made
    for deployment_id in made.list_owned("team-a"):
        made.remove(make_spec(deployment_id))


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


class TestTheEndpointStays:
    def test_a_stopped_deployment_resumes_on_its_port_and_no_other_engine_takes_it_meanwhile(self, backend):
        first = backend.ensure(make_spec(7))
        assert backend.remove(make_spec(7))  # stopped: its run directory is gone

        other = backend.ensure(make_spec(8))
        again = backend.ensure(make_spec(7))

        assert again.endpoint_url == first.endpoint_url != other.endpoint_url
        assert wait_for(lambda: (o := backend.observe(make_spec(7))).state == "ready" and o).endpoint_url == (
            first.endpoint_url
        )

    def test_a_reboot_restarts_it_on_its_port(self, backend):
        first = backend.ensure(make_spec())
        state = backend.load_state(7)
        # The machine went down: the engine is gone, its run directory stays, from another boot.
        terminate_session(state.pid, state.start_time, timeout=5)
        state_file = backend.run_dir(7) / "state.json"
        state_file.write_text(json.dumps({**asdict(state), "boot_id": "an-earlier-boot"}))

        again = backend.ensure(make_spec())

        assert [e[1] for e in again.events] == ["Created"] and again.endpoint_url == first.endpoint_url
        assert backend.load_state(7).pid != state.pid

    def test_an_engine_from_before_ports_were_kept_keeps_its_port_when_it_restarts(self, backend):
        first = backend.ensure(make_spec())
        (backend.root / ASSIGNMENTS_FILE).unlink()  # as the state an earlier release left

        new = backend.ensure(make_spec(served_model_name="tiny-v2", generation=2))

        assert [e[1] for e in new.events] == ["Updated"] and new.endpoint_url == first.endpoint_url

    def test_a_port_another_process_took_moves_the_endpoint_and_an_event_says_so(self, backend):
        first = backend.ensure(make_spec())
        backend.remove(make_spec())
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", port_of(first.endpoint_url)))
            squatter.listen()

            moved = backend.ensure(make_spec())

            assert moved.endpoint_url != first.endpoint_url  # what the portal stores and shows
            assert [(e[0], e[1]) for e in moved.events] == [("Normal", "Created"), ("Warning", "EndpointMoved")]
            assert first.endpoint_url in moved.events[1][2] and moved.endpoint_url in moved.events[1][2]
            ready = wait_for(lambda: (o := backend.observe(make_spec())).state == "ready" and o)
            assert ready.endpoint_url == moved.endpoint_url
        pid = backend.load_state(7).pid

        # From then on the new port is the deployment's: it stays there once the old one is free.
        again = backend.ensure(make_spec(served_model_name="tiny-v2", generation=2))
        assert again.endpoint_url == moved.endpoint_url and gone(pid)
        assert [e[1] for e in again.events] == ["Updated"]
        assert process_alive(backend.load_state(7).pid, backend.load_state(7).start_time)


class TestAssignments:
    def test_a_kept_port_is_never_handed_to_another_engine(self, tmp_path):
        allocator = PortAllocator(tmp_path)
        kept, _ = allocator.assign(3, 1)

        handed = {p for _ in range(200) for p in allocator.allocate(1)}
        handed |= {p for deployment_id in range(10, 110) for p in allocator.assign(deployment_id, 1)[0]}

        assert not set(kept) & handed
        assert allocator.assign(3, 1) == (kept, None)

    def test_an_engine_with_more_ports_keeps_the_serving_one(self, tmp_path):
        allocator = PortAllocator(tmp_path)
        (serve,), _ = allocator.assign(3, 1)  # vLLM's one port; then the Ray app wants two

        ports, moved_from = allocator.assign(3, 2)

        assert ports[0] == serve and len(set(ports)) == 2 and moved_from is None
