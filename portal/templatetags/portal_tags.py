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
