"""One limits table: the model, the API, the form, the scale service and the page agree with it."""

from __future__ import annotations

import pytest

from core.exceptions import DomainError
from deployments import services
from deployments.api.serializers import DeploymentSpecSerializer, ScaleSerializer
from deployments.forms import DeploymentForm, ScaleForm
from deployments.limits import LIMITS
from deployments.models import ModelDeployment


def _bounds_of_validators(field) -> tuple:
    low = next(v.limit_value for v in field.validators if type(v).__name__ == "MinValueValidator")
    high = next(v.limit_value for v in field.validators if type(v).__name__ == "MaxValueValidator")
    return low, high


@pytest.mark.parametrize("name", list(LIMITS))
def test_every_layer_reads_the_same_limits(world, name):
    want = (LIMITS[name].low, LIMITS[name].high)
    assert _bounds_of_validators(ModelDeployment._meta.get_field(name)) == want
    api = DeploymentSpecSerializer().fields[name]
    assert (api.min_value, api.max_value) == want
    form = DeploymentForm(user=world.users["member"]).fields[name]
    assert (form.min_value, form.max_value) == want


def test_the_scale_forms_and_page_use_the_replica_limits(world):
    for fields in (ScaleSerializer().fields, ScaleForm().fields):
        assert (fields["max_replicas"].min_value, fields["max_replicas"].max_value) == (1, 100)
        assert (fields["min_replicas"].min_value, fields["min_replicas"].max_value) == (0, 100)
    dep = services.deployment_create(
        tenant=world.alpha,
        user=world.users["member"],
        data={"name": "lim", "model_source": "org/m", "flavor": world.h100, "max_model_len": 4096},
    )
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])  # the scale form shows stopped too
    page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
    assert 'name="max_replicas" min="1" max="100"' in page and 'name="min_replicas" min="0" max="100"' in page
    with pytest.raises(DomainError, match="1 ≤ max ≤ 100"):
        services.deployment_scale(deployment_id=dep.pk, user=world.users["member"], min_replicas=0, max_replicas=101)
