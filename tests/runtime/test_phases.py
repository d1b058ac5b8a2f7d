"""Startup phases from what the cluster and the engine say (runtime.phases), and the local
engine's log tail and markers (runtime.backends.local.insight)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.backends.local.insight import engine_markers, tail
from runtime.phases import PHASES, cluster_markers, log_markers, timeline
from tests.support.k8s.startup import iso, vllm_line

T0 = datetime(2026, 12, 1, 4, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pod(name: str, *, scheduled: float, started: float | None, ready: float | None) -> dict:
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(at(scheduled))}]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready is not None else "False",
            "lastTransitionTime": iso(at(ready if ready is not None else scheduled)),
        }
    )
    statuses = [{"name": "ray-worker", "state": {"running": {"startedAt": iso(at(started))}}}] if started else []
    return {"metadata": {"name": name}, "status": {"conditions": conditions, "containerStatuses": statuses}}


WORKLOAD = {
    "metadata": {"creationTimestamp": iso(at(2))},
    "status": {"conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": iso(at(30))}]},
}


class TestClusterMarkers:
    def test_each_step_counts_once_every_pod_took_it(self):
        pods = [pod("w-0", scheduled=31, started=90, ready=200), pod("w-1", scheduled=35, started=95, ready=210)]
        events = [
            {"reason": "Pulled", "involvedObject": {"name": "w-0"}, "lastTimestamp": iso(at(88))},
            {"reason": "Pulled", "involvedObject": {"name": "w-1"}, "lastTimestamp": iso(at(93))},
        ]
        markers = cluster_markers(workload=WORKLOAD, pods=pods, events=events)
        assert markers == {
            "queued": at(2),
            "admitted": at(30),
            "scheduled": at(35),
            "image_pulled": at(93),
            "engine_ready": at(210),
        }

    def test_a_pod_still_pending_holds_the_step_back(self):
        pending = {"metadata": {"name": "w-1"}, "status": {"conditions": []}}
        markers = cluster_markers(
            workload=WORKLOAD, pods=[pod("w-0", scheduled=31, started=90, ready=None), pending], events=[]
        )
        assert set(markers) == {"queued", "admitted"}

    def test_the_jobs_ready_condition_is_engine_ready(self):
        rayservice = {
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": iso(at(300))}]}
        }
        markers = cluster_markers(workload=None, pods=[], events=[], ready_object=rayservice)
        assert markers == {"engine_ready": at(300)}

    def test_ready_pods_under_a_job_not_ready_yet_are_not_engine_ready(self):
        """Markers are kept as first seen: a pods-Ready time would stay, and charge the time until
        the RayService is Ready (KubeRay, Ray Serve loading the model) to the portal (bench B10)."""
        starting = {"status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": iso(at(5))}]}}
        pods = [pod("w-0", scheduled=31, started=90, ready=200)]
        markers = cluster_markers(workload=WORKLOAD, pods=pods, events=[], ready_object=starting)
        assert "engine_ready" not in markers and markers["image_pulled"] == at(90)


class TestLogMarkers:
    def test_vllm_lines_give_weights_loading_and_engine_ready(self):
        text = (
            "noise without a timestamp\n"
            + vllm_line(at(100), "Starting to load model /models/tiny...")
            + vllm_line(at(101), "Starting to load model again (ignored: first wins)")
            + vllm_line(at(140), "Starting vLLM server on http://127.0.0.1:8000", process="APIServer pid=7")
        )
        assert log_markers(text, now=at(150)) == {"weights_loading": at(100), "engine_ready": at(140)}

    def test_a_line_from_last_december_read_in_january_keeps_its_year(self):
        line = vllm_line(datetime(2026, 12, 31, 23, 59, 0, tzinfo=UTC), "Starting to load model m")
        found = log_markers(line, now=datetime(2027, 1, 1, 0, 1, tzinfo=UTC))
        assert found["weights_loading"] == datetime(2026, 12, 31, 23, 59, 0, tzinfo=UTC)

    @pytest.mark.parametrize("line", ["INFO 13-45 99:99:99 [x.py:1] Starting to load model", "Starting to load model"])
    def test_malformed_lines_are_skipped(self, line):
        assert log_markers(line, now=T0) == {}


class TestTimeline:
    def test_durations_add_up_to_approval_to_ready(self):
        markers = {
            "approved": at(0),
            "process_started": at(1.5),
            "weights_loading": at(20),
            "engine_ready": at(70),
            "ready": at(71),
        }
        rows = timeline(markers, now=at(500))
        assert [r["name"] for r in rows] == ["approved", "process_started", "weights_loading", "engine_ready", "ready"]
        assert [r["duration"] for r in rows] == [1.5, 18.5, 50.0, 1.0, 0.0]
        assert sum(r["duration"] for r in rows) == (markers["ready"] - markers["approved"]).total_seconds()
        assert not any(r["running"] for r in rows)

    def test_the_last_phase_runs_until_now_and_order_is_the_phase_order(self):
        rows = timeline({"admitted": at(30), "approved": at(0), "queued": at(1)}, now=at(45))
        assert [r["name"] for r in rows] == ["approved", "queued", "admitted"]
        assert rows[-1]["running"] and rows[-1]["duration"] == 15.0

    def test_a_marker_before_its_predecessor_starts_with_it(self):
        rows = timeline({"approved": at(10), "process_started": at(9)}, now=at(12))
        assert rows[1]["start"] == at(10) and rows[0]["duration"] == 0.0

    def test_nothing_recorded_is_an_empty_timeline(self):
        assert timeline({}, now=T0) == []

    def test_every_phase_has_a_label(self):
        assert len({name for name, _ in PHASES}) == len(PHASES) and all(label for _, label in PHASES)


class TestLocalTail:
    def test_lines_then_bytes_bound_the_tail(self, tmp_path):
        log = tmp_path / "engine.log"
        log.write_text("".join(f"line {i}\n" for i in range(1000)))
        text, cut = tail(log, lines=3, max_bytes=10_000)
        assert text == "line 997\nline 998\nline 999\n" and cut
        text, cut = tail(log, lines=100, max_bytes=9)
        assert text == "line 999\n" and cut
        text, cut = tail(log, lines=5000, max_bytes=1_000_000)
        assert text.count("\n") == 1000 and not cut

    def test_a_huge_log_is_read_from_its_end_only(self, tmp_path):
        log = tmp_path / "engine.log"
        with open(log, "wb") as handle:
            handle.write(b"x" * 50_000_000 + b"\nlast line\n")
        text, cut = tail(log, lines=10, max_bytes=100)
        assert text == "last line\n" and cut

    def test_a_missing_log_is_empty(self, tmp_path):
        assert tail(tmp_path / "absent.log", lines=10, max_bytes=10) == ("", False)

    def test_markers_count_only_this_runs_lines(self, tmp_path):
        log = tmp_path / "engine.log"
        started = datetime.now(UTC).replace(microsecond=0)
        earlier_run = vllm_line(started - timedelta(hours=1), "Starting to load model old")
        # On this machine vLLM writes its local time.
        local = (started + timedelta(seconds=5)).astimezone().strftime("%m-%d %H:%M:%S")
        this_run = f"(EngineCore_DP0 pid=9) INFO {local} [cpu_model_runner.py:68] Starting to load model new\n"
        log.write_text(earlier_run + "\n=== 2026-12-01 starting: python -m vllm\n" + this_run)
        markers = engine_markers(log, started.timestamp(), None)
        assert markers["process_started"] == started
        assert markers["weights_loading"] == started + timedelta(seconds=5)
