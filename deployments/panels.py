"""Extension points of the deployment pages: what the apps above deployments show on them.

The detail page (with its polled status partial) and the list rows show things this app does
not own, such as the engine metrics: live tokens/s and KV cache in the rows, the advice and the
charts on the detail page. An app that owns such a part registers a context provider here from
its AppConfig.ready() (metrics/apps.py); the views merge what the providers return into the
template context, in registration order. deployments never imports those apps: they sit above
it (docs/architecture.md, "Layout"), and the templates read the names the providers document.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.http import HttpRequest

from deployments.models import ModelDeployment

DetailProvider = Callable[[HttpRequest, ModelDeployment], dict[str, Any]]
ListProvider = Callable[[HttpRequest, Sequence[ModelDeployment]], dict[str, Any]]

_detail_providers: list[DetailProvider] = []
_list_providers: list[ListProvider] = []


def register_detail_context(provider: DetailProvider) -> DetailProvider:
    """Add `provider(request, deployment) -> dict` to the detail page's and status partial's context."""
    if provider not in _detail_providers:  # ready() may run more than once (tests, reloads)
        _detail_providers.append(provider)
    return provider


def register_list_context(provider: ListProvider) -> ListProvider:
    """Add `provider(request, deployments) -> dict` to the list page's (and its rows') context."""
    if provider not in _list_providers:
        _list_providers.append(provider)
    return provider


def extra_detail_context(request: HttpRequest, dep: ModelDeployment) -> dict[str, Any]:
    """What the registered providers add to the detail context of `dep`."""
    context: dict[str, Any] = {}
    for provider in _detail_providers:
        context.update(provider(request, dep))
    return context


def extra_list_context(request: HttpRequest, deployments: Sequence[ModelDeployment]) -> dict[str, Any]:
    """What the registered providers add to the context of a list of `deployments`."""
    context: dict[str, Any] = {}
    for provider in _list_providers:
        context.update(provider(request, deployments))
    return context
