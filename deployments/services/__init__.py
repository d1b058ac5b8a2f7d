"""Deployment services: every write with an invariant. UI views, API actions, the admin, the
policy sweeps and tasks all call these (`services.deployment_<verb>`).

`revisions` owns requests, changes and decisions; `lifecycle` what runs (stop, start, delete,
observations); `common` the row lock, transitions and the one GPU rule, `settle_gpus`.
"""

from deployments.services.common import DraftInvalid, settle_gpus, transition
from deployments.services.lifecycle import (
    deployment_delete,
    deployment_mark_deleted,
    deployment_observe,
    deployment_record_queue,
    deployment_start,
    deployment_stop,
)
from deployments.services.revisions import (
    APPROVAL_FIELDS,
    deployment_approve,
    deployment_cancel,
    deployment_create,
    deployment_reject,
    deployment_rollback,
    deployment_scale,
    deployment_update,
    deployment_withdraw,
    needs_approval,
)

__all__ = [
    "APPROVAL_FIELDS",
    "DraftInvalid",
    "deployment_approve",
    "deployment_cancel",
    "deployment_create",
    "deployment_delete",
    "deployment_mark_deleted",
    "deployment_observe",
    "deployment_record_queue",
    "deployment_reject",
    "deployment_rollback",
    "deployment_scale",
    "deployment_start",
    "deployment_stop",
    "deployment_update",
    "deployment_withdraw",
    "needs_approval",
    "settle_gpus",
    "transition",
]
