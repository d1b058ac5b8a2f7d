"""The API's request parsers: DRF's, minus the ways a body can crash them or slip past them.

A hostile body must cost a 400 that says what is wrong, never a 500:

* JSON nested deeper than MAX_JSON_DEPTH is refused *before* it is parsed. The C decoder
  recurses once per level and gives up with RecursionError near Python's recursion limit (a
  500); on a thread with a small stack it could overflow first. The body is already bounded by
  DATA_UPLOAD_MAX_MEMORY_SIZE (DRF reads JSON and form bodies through `request.body`, which
  raises RequestDataTooBig: core.exceptions answers 413), so the pre-scan is linear in a
  bounded input.
* A string holding an unpaired surrogate (`"\\ud800"`) is valid JSON but not Unicode: nothing
  can encode it, so it would fail at the database or the renderer.
* Form bodies are read strictly: a `%` that is not followed by two hex digits, or octets that
  do not decode in the body's charset, are refused instead of silently becoming U+FFFD.
* A multipart boundary outside RFC 2046's alphabet is refused (Django accepts any printable
  one, and with `boundary="` it cut a field out of the middle of the body), and so is a body
  with no part delimited by its boundary, instead of reading as an empty form.

An unknown or non-text `charset` in Content-Type is refused earlier, for every request, by
portal.middleware (Django decodes even the query string with it).
"""

from __future__ import annotations

import io
import re
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qsl

from django.utils.http import parse_header_parameters
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils import json

MAX_JSON_DEPTH = 32  # the deepest real payload (a flavor's tolerations) is 3 levels

# A JSON string, terminated or not: the optional closing quote keeps the scan linear on
# unterminated input (no retry from every later quote).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]")  # RFC 2046 §5.1.1


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether any array/object in `text` opens more than `limit` levels deep (strings skipped)."""
    if text.count("[") + text.count("{") <= limit:
        return False  # the common case: too few brackets to nest that deep at all
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def _unpaired_surrogate(data: Any) -> str | None:
    """The first string (or key) in parsed JSON that is not encodable Unicode, or None."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"\\u{ord(item[exc.start]):04x}"
    return None


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser with a nesting limit and a Unicode check; same errors otherwise."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})
        raw = stream.read()
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}: {exc}") from None
        if json_depth_exceeds(text):
            raise ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep.")
        try:
            data = json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except RecursionError:  # not reachable past the depth check; kept so it can never be a 500
            raise ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep.") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        if _SURROGATE_ESCAPE.search(text) and (bad := _unpaired_surrogate(data)):
            raise ParseError(
                f"JSON parse error - a string contains an unpaired surrogate ({bad}), which is not valid Unicode."
            )
        return data


class FormParser(parsers.FormParser):
    """DRF's form parser, refusing bad percent-encoding and octets invalid in the charset."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})
        raw = stream.read()
        try:
            text = raw.decode(encoding)
            if match := _BAD_PERCENT.search(text):
                raise ParseError(
                    f"Form parse error - bad percent-encoding at character {match.start()}: "
                    "'%' must be followed by two hex digits."
                )
            # Decoding errors of percent-escaped octets surface only when they are unescaped.
            parse_qsl(text, keep_blank_values=True, encoding=encoding, errors="strict")
        except UnicodeDecodeError as exc:
            raise ParseError(f"Form parse error - the body is not valid {encoding}: {exc}") from None
        # Django's QueryDict, as DRF builds it: it enforces DATA_UPLOAD_MAX_NUMBER_FIELDS.
        return super().parse(io.BytesIO(raw), media_type, parser_context)


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser; a body with no part delimited by its boundary is an error."""

    def parse(self, stream, media_type=None, parser_context=None):
        boundary = parse_header_parameters(media_type or "")[1].get("boundary")
        if boundary is None or not _BOUNDARY.fullmatch(boundary):
            raise ParseError(
                f"Multipart form parse error - invalid boundary {boundary!r} in Content-Type: "
                "1 to 70 letters, digits, spaces or '()+_,-./:=? (RFC 2046)."
            )
        result = super().parse(stream, media_type, parser_context)
        if not result.data and not result.files:
            # DRF parses only bodies with a Content-Length: this one had bytes but no parts.
            raise ParseError(
                "Multipart form parse error - the body has no part delimited by the boundary declared in Content-Type."
            )
        return result
