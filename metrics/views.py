"""Browser views for metrics: the deployment dashboard's figures."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404

from deployments.models import ModelDeployment
from metrics.charts import dashboard, figure_json
from metrics.collect import rate_window_s
from metrics.store import WINDOWS, series


@login_required
def deployment_charts(request, pk: int):
    """The dashboard's figures for a window, built by the pure builders in metrics.charts."""
    dep = get_object_or_404(ModelDeployment.objects.visible_to(request.user).live(), pk=pk)
    window = request.GET.get("window", "1h")
    if window not in WINDOWS:
        raise Http404("unknown window")
    data = series(dep, window)
    meta = f'"_meta":{{"points":{len(data["timestamps"])},"resolution_s":{data["resolution_s"]}}}'
    if not data["timestamps"]:
        # Nothing to plot: the page hides the charts, so empty figures (~64 KB) would be wasted.
        return HttpResponse("{" + meta + "}", content_type="application/json")
    # A rollup's point is the mean of its bucket's rates: it covers the bucket, not just the window.
    window_s = max(rate_window_s(), float(data["resolution_s"]))
    span = (data["start"], data["end"])
    figures = dashboard(data["timestamps"], data["series"], span=span, window_s=window_s, task=dep.task)
    body = "{" + ",".join(f'"{name}":{figure_json(fig)}' for name, fig in figures.items()) + "," + meta + "}"
    return HttpResponse(body, content_type="application/json")
