"""Where snapshots come from: an HTTP scrape of one endpoint or many at once (Prometheus: promql)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import requests
import urllib3

from runtime.exposition.parse import ScrapeError, parse_exposition
from runtime.exposition.snapshot import Snapshot

# Exposition bodies above this are refused: a real Ray node exposition is ~1 MB.
MAX_BODY_BYTES = 32 * 1024 * 1024

_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"

K = TypeVar("K")


def get_text(url: str, timeout: float, params: Mapping[str, str] | None = None) -> str:
    """GET with an overall deadline and a size cap.

    requests' timeout bounds each socket read, so a server dripping a byte a second never
    trips it; reading with ``read1`` (whatever has arrived) lets the deadline be checked.
    """
    deadline = time.monotonic() + timeout
    try:
        with requests.get(url, params=params, timeout=timeout, stream=True, headers={"Accept": _ACCEPT}) as resp:
            resp.raise_for_status()
            chunks: list[bytes] = []
            size = 0
            while chunk := resp.raw.read1(64 * 1024, decode_content=True):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ScrapeError(f"{url}: body larger than {MAX_BODY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ScrapeError(f"{url}: timed out: no complete answer within {timeout} s")
            # The exposition format is UTF-8 by definition, whatever the Content-Type says.
            return b"".join(chunks).decode("utf-8", errors="replace")
    except (requests.Timeout, urllib3.exceptions.TimeoutError) as exc:
        raise ScrapeError(f"{url}: timed out after {timeout} s") from exc
    except requests.HTTPError as exc:
        raise ScrapeError(f"{url}: HTTP {exc.response.status_code}") from exc
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise ScrapeError(f"{url}: {exc.__class__.__name__}: {exc}") from exc


def scrape(
    url: str,
    timeout: float = 5.0,
    *,
    match_labels: Mapping[str, str] | None = None,
    require_vllm: bool = True,
) -> Snapshot:
    """Fetch and parse one exposition (vLLM ``/metrics`` or a Ray metrics port)."""
    text = get_text(url, timeout)
    taken_at = time.time()
    try:
        return parse_exposition(text, taken_at, match_labels=match_labels, require_vllm=require_vllm)
    except ScrapeError as exc:
        raise ScrapeError(f"{url}: {exc}") from exc


def scrape_many(
    targets: Mapping[K, str | Sequence[str]],
    timeout: float = 5.0,
    max_workers: int = 32,
    *,
    match_labels: Mapping[str, str] | None = None,
) -> dict[K, Snapshot | ScrapeError]:
    """Scrape every target concurrently; each key gets a Snapshot or the ScrapeError.

    A key's target is one URL, or several for a deployment spread over nodes (a Ray
    cluster's pods): those are read side by side and merged (:meth:`Snapshot.merged`). Every
    one of them must answer (a missing node would read as a drop in its counters), and
    together they must hold vLLM series; a node without any (the Ray head) is fine.

    With no more URLs than workers the call returns within about ``timeout``; beyond that,
    each further wave of ``max_workers`` URLs may add one ``timeout``. A URL still being read
    at the end is reported as timed out and its thread left to finish on its own (it stops at
    its own deadline), so one stuck endpoint never holds up the sweep.
    """
    urls = {key: [target] if isinstance(target, str) else list(target) for key, target in targets.items()}
    results: dict[K, Snapshot | ScrapeError] = {
        key: ScrapeError("no endpoint to scrape") for key, group in urls.items() if not group
    }
    jobs = [(key, url) for key, group in urls.items() for url in group]
    if not jobs:
        return results
    workers = max(1, min(max_workers, len(jobs)))
    waves = math.ceil(len(jobs) / workers)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape")
    parts: dict[K, list[Snapshot]] = {}
    try:
        futures = {
            pool.submit(scrape, url, timeout, match_labels=match_labels, require_vllm=len(urls[key]) == 1): (key, url)
            for key, url in jobs
        }
        # A small grace beyond the per-request deadlines for thread start and parsing.
        done, _ = wait(futures, timeout=waves * timeout + 1.0)
        for future, (key, url) in futures.items():
            if key in results:
                continue  # another of its URLs already failed
            if future not in done:
                results[key] = ScrapeError(f"{url}: timed out after {timeout} s")
            elif (exc := future.exception()) is None:
                parts.setdefault(key, []).append(future.result())
            elif isinstance(exc, ScrapeError):
                results[key] = exc
            else:  # a bug, not a bad endpoint: keep the sweep going but say what it was
                results[key] = ScrapeError(f"{url}: {exc!r}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for key, snapshots in parts.items():
        if key in results:
            continue
        snapshot = snapshots[0] if len(snapshots) == 1 else Snapshot.merged(snapshots)
        if snapshot.empty:
            results[key] = ScrapeError(f"no vllm:* or ray_vllm_* metrics on any of its {len(snapshots)} endpoints")
        else:
            results[key] = snapshot
    return results
