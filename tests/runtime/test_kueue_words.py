"""Kueue's pending messages in words (runtime/kueue_words.py). The inputs are Kueue 0.19.2's own
formats (kubernetes-sigs/kueue v0.19.2, pkg/scheduler/flavorassigner/flavorassigner.go:
`Assignment.Message` joins pod sets with "; ", each "couldn't assign flavors to pod set <name>: "
and the reasons of `Status.appendf`); tests/cluster/test_contract_lifecycle.py reads one from the
real Kueue."""

from __future__ import annotations

import pytest

from runtime.kueue_words import kueue_words

WAITING = (
    "couldn't assign flavors to pod set gpu-group: flavor portal-cpu doesn't match node affinity, "
    "insufficient unused quota for nvidia.com/gpu in flavor h100-sxm5, 8 more needed"
)


class TestWords:
    def test_waiting_for_quota_drops_the_cpu_flavor_every_gpu_worker_skips(self):
        assert kueue_words(WAITING) == "Waiting for quota: 8 more GPUs of h100-sxm5 must be free first."

    def test_one_gpu_is_singular(self):
        message = (
            "couldn't assign flavors to pod set w: insufficient unused quota for nvidia.com/gpu in flavor l4, "
            "1 more needed"
        )
        assert kueue_words(message) == "Waiting for quota: 1 more GPU of l4 must be free first."

    def test_more_than_the_queue_can_ever_give(self):
        message = (
            "couldn't assign flavors to pod set w: flavor portal-cpu doesn't match node affinity, insufficient "
            "quota for nvidia.com/gpu in flavor h100, request > maximum capacity (16 > 8)"
        )
        assert kueue_words(message) == (
            "Asks for more GPUs of h100 than the queue can ever give (8 GPUs, borrowing included): it waits "
            "until the quota is raised."
        )

    def test_the_podsets_form_of_the_maximum(self):
        message = (
            "couldn't assign flavors to pod set w: insufficient quota for nvidia.com/gpu in flavor h100, "
            "previously considered podsets requests (8) + current podset request (8) > maximum capacity (8)"
        )
        assert kueue_words(message).startswith("Asks for more GPUs of h100 than the queue can ever give (8 GPUs")

    def test_a_pod_set_listed_only_for_the_flavors_it_skipped_says_it_waits(self):
        """Seen on the real Kueue 0.19.2 for a full queue (tests/cluster/test_contract_lifecycle.py):
        the message names only the head's skipped GPU flavors, though the head fitted the CPU
        flavor; it says nothing of the real wait, so neither does the portal."""
        message = (
            "couldn't assign flavors to pod set head: flavor a100-pcie doesn't match node affinity, "
            "flavor h100-sxm5 doesn't match node affinity"
        )
        assert kueue_words(message) == "Waiting for room in the queue: Kueue has not admitted it yet."

    def test_a_taint_and_two_pod_sets(self):
        message = (
            "couldn't assign flavors to pod set head: untolerated taint nvidia.com/gpu=present:NoSchedule in flavor "
            "h100; " + WAITING
        )
        assert kueue_words(message) == (
            "Its pods do not tolerate the taint nvidia.com/gpu=present:NoSchedule of h100's nodes; waiting for "
            "quota: 8 more GPUs of h100-sxm5 must be free first."
        )

    @pytest.mark.parametrize(
        "message",
        [
            "",
            "Waiting for Kueue to admit the workload.",
            "failed to assign flavors to pod set w: some error",
            "couldn't assign flavors to pod set w: a reason from a newer Kueue",
            "couldn't assign flavors to pod set w: flavor a doesn't match node affinity, something new",
            "couldn't assign flavors to pod set w: flavor a doesn't match node affinity; and a newer format",
        ],
    )
    def test_anything_else_is_left_as_kueue_wrote_it(self, message):
        assert kueue_words(message) == message
