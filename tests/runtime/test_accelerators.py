"""Ray's accelerator type names (runtime.accelerators), pinned to Ray 2.60.0.

Source: ray-project/ray python/ray/util/accelerators/accelerators.py at tag ray-2.60.0 (the PyPI
wheel ray-2.60.0, commit b7f4259e944bf6959f721b106adc366ddfa0c356): 62 string constants. Ray Serve
LLM accepts exactly their values (`LLMConfig.validate_accelerator_type`,
python/ray/llm/_internal/serve/core/configs/llm_config.py, same tag: `value not in [t.value for t in
AcceleratorType]`, case-sensitive, "A10" rewritten to "A10G" first). When the `ray[serve]` pin in
pyproject.toml moves, these numbers must be re-read from that file.
"""

from __future__ import annotations

import re

import pytest

from runtime.accelerators import (
    CPU_ONLY,
    OFFERED,
    RAY_ACCELERATOR_TYPES,
    RAY_VERSION,
    accelerator_type_problem,
    closest,
    ray_accelerator_type,
)


class TestRaysList:
    def test_it_is_rays_list_for_the_pinned_version(self):
        pyproject = open("pyproject.toml", encoding="utf-8").read()
        assert f'"ray[serve]=={RAY_VERSION}"' in pyproject  # the list belongs to the Ray the portal pins
        assert RAY_VERSION == "2.60.0"
        assert len(RAY_ACCELERATOR_TYPES) == 62 and len(set(RAY_ACCELERATOR_TYPES)) == 62
        assert RAY_ACCELERATOR_TYPES[:10] == ("V100", "P100", "T4", "P4", "K80", "A10G", "L4", "L40S", "A100", "H100")
        for name in ("H200", "B200", "GB300", "RTX-PRO-6000", "A100-40G", "A100-80G", "AMD-Instinct-MI300X-OAM"):
            assert name in RAY_ACCELERATOR_TYPES
        for name in ("aws-neuron-core", "TPU-V6E", "TPU-V7X", "Intel-GAUDI", "FURIOSA_RNGD", "MOBILINT_REGULUS"):
            assert name in RAY_ACCELERATOR_TYPES

    def test_ray_knows_neither_cpu_nor_the_a10_alias_as_names(self):
        assert CPU_ONLY == "CPU" and CPU_ONLY not in RAY_ACCELERATOR_TYPES
        assert "A10" not in RAY_ACCELERATOR_TYPES
        assert OFFERED == (*RAY_ACCELERATOR_TYPES, "CPU")

    def test_every_name_is_a_label_value_that_fits_the_field(self):
        # GpuFlavor.accelerator_type: max_length 40 and a Kubernetes label value.
        label_value = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
        assert all(len(name) <= 40 and label_value.match(name) for name in OFFERED)


class TestProblem:
    @pytest.mark.parametrize("name", ["H100", "A100-80G", "aws-neuron-core", "TPU-V5LITEPOD", "A10", "CPU", ""])
    def test_names_ray_accepts_have_none(self, name):
        assert accelerator_type_problem(name) is None

    def test_a_typo_names_the_closest(self):
        assert (
            accelerator_type_problem("H10") == "'H10' is not one of Ray's accelerator types; did you mean H100 or H20?"
        )
        assert (
            accelerator_type_problem("L40") == "'L40' is not one of Ray's accelerator types; did you mean L40S or L4?"
        )

    @pytest.mark.parametrize(("value", "name"), [("h100", "H100"), ("a100-80g", "A100-80G"), ("cpu", "CPU")])
    def test_case_counts_as_ray_compares_exactly(self, value, name):
        assert accelerator_type_problem(value) == (
            f"'{value}' is not one of Ray's accelerator types (Ray matches case exactly); did you mean {name}?"
        )

    def test_a_part_of_a_name_or_a_name_in_words_is_found(self):
        assert closest("MI300X")[:2] == ["AMD-Instinct-MI300X-OAM", "AMD-Instinct-MI300X-HF"]
        assert closest("gaudi") == ["Intel-GAUDI"]
        assert closest("NVIDIA H100") == ["H100"]

    def test_nothing_close_gives_examples(self):
        assert accelerator_type_problem("quantum") == (
            "'quantum' is not one of Ray's accelerator types (Ray 2.60.0), e.g. H100, A100, L4, "
            "or CPU for a flavor without an accelerator."
        )


class TestWhatRayIsGiven:
    @pytest.mark.parametrize(("value", "given"), [("H100", "H100"), ("A10", "A10"), ("CPU", None), ("", None)])
    def test_a_cpu_only_flavor_gives_ray_none(self, value, given):
        assert ray_accelerator_type(value) == given
