from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """`{{ mapping|get_item:key }}` for dicts keyed by ids."""
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def make_list_words(value: str) -> list[str]:
    return value.split()


@register.filter
def state_label(value: str) -> str:
    """Human words for a lifecycle state or derived badge ('pending_approval' → 'Pending approval')."""
    from deployments.choices import State

    try:
        return State(value).label
    except ValueError:
        return str(value).replace("_", " ").capitalize()


@register.filter
def policy_words(tenant) -> str:
    """A tenant's request policy in words (quotas.policy.policy_words)."""
    from quotas.policy import policy_words as words

    return words(tenant)


# The audit log's action codes (core.models.AuditEvent.action), as the pages say them.
AUDIT_LABELS = {
    "quota_change.request": "Quota change requested",
    "quota_change.approve": "Quota change approved",
    "quota_change.reject": "Quota change rejected",
    "quota.set": "Quota set",
    "deployment.request": "Deployment requested",
    "deployment.approve": "Deployment approved",
    "deployment.reject": "Deployment rejected",
    "deployment.cancel": "Deployment cancelled",
    "deployment.stop": "Deployment stopped",
    "deployment.start": "Deployment started",
    "deployment.scale": "Deployment scaled",
    "deployment.update": "Deployment spec changed",
    "deployment.delete": "Deployment deleted",
    "deployment.idle_warning": "Idle warning",
    "deployment.schedule_start_failed": "Scheduled start refused",
    "quota_change.revert": "Temporary quota ended",
    "quota_change.revert_waiting": "Temporary quota end waits",
    "quota_change.superseded": "Temporary quota superseded",
    "deployment.withdraw": "Proposed change withdrawn",
    "deployment.rollback": "Deployment rolled back",
    "tenant.create": "Tenant created",
    "tenant.update": "Tenant names changed",
    "tenant.policy": "Request policy changed",
    "tenant.archive": "Tenant archived",
    "tenant.budget_stop": "Budget hard stop reached",
    "tenant.budget_resume": "Budget stop lifted",
    "tenant.storage": "Model-cache claim settings changed",
    "tenant_secret.set": "Credential set",
    "tenant_secret.rotate": "Credential replaced",
    "tenant_secret.delete": "Credential deleted",
    "tier.create": "Priority tier created",
    "tier.update": "Priority tier changed",
    "tier.delete": "Priority tier deleted",
}


@register.filter
def audit_label(action: str) -> str:
    """ "quota_change.request" → "Quota change requested"; a code without a label reads as words."""
    if action in AUDIT_LABELS:
        return AUDIT_LABELS[action]
    return str(action).replace("_", " ").replace(".", ": ").capitalize()


# Words a field name spells in lower case that read otherwise in a sentence.
FIELD_WORDS = {"gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "gib": "GiB", "mtok": "1M output tokens"}


@register.filter
def field_label(name: str) -> str:
    """A field name of an audit entry's changes as words: "nominal_gpus" → "Nominal GPUs"."""
    text = " ".join(FIELD_WORDS.get(word, word) for word in str(name).split("_"))
    return text[:1].upper() + text[1:]


@register.filter
def plain_time(value) -> str:
    """An RFC 3339 string ("2026-12-01T04:31:07.123456Z") as the pages show times: "2026-12-01 04:31:07 UTC"."""
    from deployments.presenters import plain_time as as_plain_time

    return as_plain_time(value if isinstance(value, str) else None) or ("" if value is None else str(value))
