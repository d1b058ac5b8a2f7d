"""The three kinds of cluster error, and the mapping from client, urllib3 and socket errors.

See the package docstring (runtime.k8s) for what each kind means to its callers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

_T = TypeVar("_T")


# --- errors ----------------------------------------------------------------------------------


class ClusterError(Exception):
    """Any failure talking to the Kubernetes API; `status` is the HTTP status or None."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientClusterError(ClusterError):
    """A failure that may go away on its own: retry later, with backoff."""


class PermanentClusterError(ClusterError):
    """A failure that repeating the same request cannot fix: record it, do not retry."""


class NotFound(PermanentClusterError):
    """The object (or its namespace, or the resource type) does not exist: HTTP 404."""


# 408 Request Timeout and 429 Too Many Requests are 4xx but explicitly invite a retry.
_TRANSIENT_4XX = frozenset({408, 429})


def classify_api_exception(exc: ApiException) -> ClusterError:
    """Map an `ApiException` to our error kinds by its HTTP status."""
    status = int(exc.status or 0)
    message = _api_message(exc)
    if status == 404:
        return NotFound(message, status=status)
    if status >= 500 or status in _TRANSIENT_4XX:
        return TransientClusterError(message, status=status)
    # 400, 401, 403, 409, 422 … and status 0, which the client uses for TLS errors and
    # requests it could not even build: neither fixes itself by waiting.
    return PermanentClusterError(message, status=status or None)


def classify_exception(exc: BaseException) -> ClusterError | None:
    """Map any exception raised by a client call to our kinds; None if it is not ours."""
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, ApiException):
        return classify_api_exception(exc)
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        # Only raised when someone configures retries; the reason is the real failure.
        return classify_exception(exc.reason) or TransientClusterError(str(exc))
    if isinstance(exc, urllib3.exceptions.SSLError):
        # A certificate the client does not trust will not become trusted by retrying.
        return PermanentClusterError(f"TLS error: {exc}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        # Timeouts, refused/reset connections, a server that hung up mid-response.
        # OSError covers ConnectionError, TimeoutError and socket errors leaking past urllib3.
        return TransientClusterError(f"{type(exc).__name__}: {exc}")
    return None


def _api_message(exc: ApiException) -> str:
    """The API server's own `Status.message` when there is one, else the HTTP reason."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("message"):
            return f"{exc.status} {exc.reason}: {status['message']}"
    return f"{exc.status} {exc.reason}"


@contextmanager
def _translated_errors() -> Iterator[None]:
    """Re-raise client, urllib3 and socket errors as `ClusterError` kinds."""
    try:
        yield
    except ClusterError:
        raise
    except Exception as exc:
        mapped = classify_exception(exc)
        if mapped is None:
            raise
        raise mapped from exc


def retry_transient(
    fn: Callable[[], _T],
    *,
    attempts: int = 5,
    backoff: float = 0.2,
    max_backoff: float = 5.0,
    sleep: Callable[[float], None] | None = None,
) -> _T:
    """Call `fn` until it stops raising `TransientClusterError`, at most `attempts` times.

    For short synchronous paths (a management command, a view that must answer now);
    Celery tasks use `autoretry_for` instead so a worker is not held while waiting.
    Permanent errors propagate on the first attempt: repeating them only adds load.
    """
    pause = sleep or time.sleep
    delay = backoff
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TransientClusterError:
            if attempt == attempts:
                raise
            pause(delay)
            delay = min(delay * 2, max_backoff)
    raise AssertionError("unreachable")  # the loop either returns or raises
