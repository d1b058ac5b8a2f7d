"""Request checks that must happen before any view, or Django itself, reads the request.

One rule, `charset_error`, at two entry points:

* `RequestFramingMiddleware` (Django middleware, first after SecurityMiddleware) answers a
  request whose Content-Type names a charset nothing can decode text with: 400, in JSON on the
  API. Django keeps any charset `codecs.lookup` knows and silently drops unknown ones, so a
  bytes-to-bytes codec (`bz2_codec`, `base64`) breaks the first read of request.POST — a 500 in
  whichever view or CSRF check touched it — and an unknown one is quietly read as UTF-8.
* `CharsetGuard` (WSGI) does the same one step earlier, and must wrap the WSGI application:
  with a query string, Django's WSGIRequest() decodes request.GET with that charset while it is
  being built, before any middleware runs, so only a WSGI wrapper can answer that request.

Body parsing itself is portal.parsers (API) and Django's forms (UI).
"""

from __future__ import annotations

import json

from django.db import DataError
from django.http import HttpResponse
from django.utils.http import parse_header_parameters

API_PREFIX = "/api/"


def charset_error(content_type: str) -> str | None:
    """Why the `charset` in a Content-Type cannot decode text, or None when it can (or is absent)."""
    charset = parse_header_parameters(content_type)[1].get("charset")
    if charset is None:
        return None
    try:
        "".encode(charset)  # unlike codecs.lookup, refuses bytes-to-bytes codecs (bz2_codec, base64…)
    except (LookupError, UnicodeError, ValueError):
        return f'Unsupported charset "{charset}" in the Content-Type header.'
    return None


def _body(message: str, path: str) -> tuple[bytes, str]:
    if path.startswith(API_PREFIX):
        return json.dumps({"detail": message, "code": "unsupported_charset"}).encode(), "application/json"
    return message.encode(), "text/plain; charset=utf-8"


class RequestFramingMiddleware:
    """Refuse a request whose Content-Type names a charset nothing can decode text with."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if message := charset_error(request.META.get("CONTENT_TYPE", "")):
            body, content_type = _body(message, request.path)
            return HttpResponse(body, status=400, content_type=content_type)
        return self.get_response(request)


class CharsetGuard:
    """WSGI wrapper: the same refusal, before Django builds the request (see the module docstring)."""

    def __init__(self, application):
        self.application = application

    def __call__(self, environ, start_response):
        message = charset_error(environ.get("CONTENT_TYPE", ""))
        if message is None:
            return self.application(environ, start_response)
        body, content_type = _body(message, environ.get("PATH_INFO", ""))
        start_response("400 Bad Request", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]


class DataErrorMiddleware:
    """A value PostgreSQL cannot hold or compare (a NUL byte in a path or a filter, a number past
    its column) is the request's fault: 400, not a 500. The API answers the same through
    core.exceptions.api_exception_handler; this covers the browser views."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, DataError):
            body, content_type = _body("A value in the request cannot be stored or looked up.", request.path)
            return HttpResponse(body, status=400, content_type=content_type)
        return None
