"""Streamed exports the API and the pages share: CSV cells a spreadsheet will not run, and the
renderers that let a client ask for CSV or JSON lines (the file itself is streamed by the view;
what passes through a renderer is an error answer)."""

from __future__ import annotations

import csv
import io
import json

from rest_framework.renderers import BaseRenderer


def csv_cell(value) -> str:
    """A value as a CSV cell; text a spreadsheet would run as a formula is quoted with a '."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class Echo:
    """A file for csv.writer that hands each written line back (streaming, nothing kept)."""

    def write(self, value: str) -> str:
        return value


class CsvRenderer(BaseRenderer):
    """Lets a client ask for text/csv; an error (400, 401, 403, 404) is written as "field,message" lines."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["field", "message"])
        for field, messages in (data or {}).items():
            for message in messages if isinstance(messages, list) else [messages]:
                writer.writerow([field, str(message)])
        return out.getvalue().encode()


class JsonLinesRenderer(BaseRenderer):
    """Lets a client ask for JSON lines (application/x-ndjson); an error is one JSON line."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return (json.dumps(data, default=str) + "\n").encode()
