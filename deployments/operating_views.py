"""Browser partials for operating a deployment: startup phases, the merged events timeline and
the engine logs (with download). Loaded by htmx from the detail page; each reads the cluster
only for this one deployment, and only when asked (`?refresh=1`, the logs panel)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpResponse
from django.shortcuts import render

from core.exceptions import DomainError
from core.params import query_int
from deployments import operating
from deployments.views import _visible
from runtime.backends import traits
from runtime.backends.insight import LOG_LINES_MAX

# At most one live Events read per deployment in this many seconds, whoever asks.
REFRESH_INTERVAL_SECONDS = 5


def refresh_allowed(dep_id: int) -> bool:
    """Whether a live read may happen now (one per deployment per REFRESH_INTERVAL_SECONDS)."""
    return cache.add(f"deployment-events-refresh:{dep_id}", 1, timeout=REFRESH_INTERVAL_SECONDS)


@login_required
def deployment_phases(request, pk: int):
    dep = _visible(request, pk)
    return render(
        request,
        "deployments/_phases_body.html",
        {"dep": dep, "phases": operating.phases(dep), "starting": dep.state in operating.STARTING},
    )


@login_required
def deployment_timeline(request, pk: int):
    dep = _visible(request, pk)
    refresh = request.GET.get("refresh") == "1" and refresh_allowed(dep.pk)
    context = {
        "dep": dep,
        "timeline": operating.timeline(dep, refresh=refresh),
        "on_cluster": traits(dep.backend).on_cluster,
    }
    return render(request, "deployments/_events_body.html", context)


@login_required
def deployment_logs(request, pk: int):
    dep = _visible(request, pk)
    lines = query_int(request.GET, "lines", minimum=1, maximum=LOG_LINES_MAX)  # the API's bounds; 400 otherwise
    try:
        result = operating.logs(dep, request.user, lines=lines)
    except DomainError as error:
        # 200, not 403: htmx swaps only successful answers, and the panel should say why.
        return render(request, "deployments/_logs_body.html", {"dep": dep, "refused": error.message})
    if request.GET.get("download") == "1":
        response = HttpResponse(operating.logs_text(result), content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{dep.resource_name}-logs.txt"'
        return response
    return render(request, "deployments/_logs_body.html", {"dep": dep, "result": result})
