"""The audit log's export for platform admins (a security team's SIEM, an auditor's spreadsheet):
every row between `since` and `until`, oldest first, as JSON lines or CSV.

Streamed: rows are read from a server-side cursor in chunks and written as they come, so an
export of a year costs the memory of one chunk. Each line is `AuditEvent.as_record()`, the same
object the `audit` logger writes (core.models).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exports import CsvRenderer, Echo, JsonLinesRenderer, csv_cell
from core.models import RECORD_FIELDS, AuditEvent
from quotas.models import is_platform_admin

ADMINS_ONLY = {"detail": "Only platform admins export the audit log.", "code": "permission_denied"}
CHUNK = 1000


# ISO 8601 as people write it: a date, or a date and time with optional seconds, fraction and
# offset. Python's own parser is laxer (it reads "2026-03-01000" as a date), so the shape is
# checked first: an instant that is not what the client meant must be a 400, not a wrong export.
ISO_8601 = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?", re.ASCII)


class InstantField(serializers.DateTimeField):
    """A DateTimeField that takes ISO 8601 only, in the shape above."""

    def to_internal_value(self, value):
        if not isinstance(value, str) or not ISO_8601.fullmatch(value):
            self.fail("invalid", format="YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss[.ffffff]][Z|±hh:mm]")
        return super().to_internal_value(value)


class AuditExportQuerySerializer(serializers.Serializer):
    """?since=&until= (ISO 8601; a date means its midnight, no offset means UTC)."""

    since = InstantField(required=False, help_text="Rows created at or after this instant (ISO 8601).")
    until = InstantField(required=False, help_text="Rows created before this instant (ISO 8601).")

    def validate(self, data: dict) -> dict:
        if "since" in data and "until" in data and data["since"] > data["until"]:
            raise serializers.ValidationError({"until": ["Must not be before since."]})
        return data


def export_rows(query: dict) -> QuerySet[AuditEvent]:
    """The rows an export covers, oldest first."""
    rows = AuditEvent.objects.select_related("actor", "tenant").order_by("created", "id")
    if "since" in query:
        rows = rows.filter(created__gte=query["since"])
    if "until" in query:
        rows = rows.filter(created__lt=query["until"])
    return rows


def json_lines(rows: QuerySet[AuditEvent]) -> Iterator[str]:
    for event in rows.iterator(chunk_size=CHUNK):
        yield json.dumps(event.as_record(), default=str, ensure_ascii=False) + "\n"


def csv_lines(rows: QuerySet[AuditEvent]) -> Iterator[str]:
    writer = csv.writer(Echo())
    yield writer.writerow(RECORD_FIELDS)
    for event in rows.iterator(chunk_size=CHUNK):
        record = event.as_record()
        record["changes"] = json.dumps(record["changes"], default=str, ensure_ascii=False)
        yield writer.writerow([csv_cell(record[name]) for name in RECORD_FIELDS])


class _AuditExportView(APIView):
    content_type = ""
    extension = ""
    lines = staticmethod(json_lines)

    def get(self, request):
        if not is_platform_admin(request.user):
            return Response(ADMINS_ONLY, status=status.HTTP_403_FORBIDDEN)
        query = AuditExportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        response = StreamingHttpResponse(self.lines(export_rows(query.validated_data)), content_type=self.content_type)
        response["Content-Disposition"] = f'attachment; filename="audit.{self.extension}"'
        return response


def _schema(media_type: str, description: str):
    """The 200 in `media_type`; errors in JSON, or in `media_type` for a client that asked for it
    (Accept or ?format=), through the view's second renderer."""
    errors = {"since/until invalid": 400, "not a platform admin": 403}
    responses = {(200, media_type): OpenApiResponse(response=OpenApiTypes.STR, description=description)}
    for why, code in errors.items():
        responses[(code, "application/json")] = OpenApiResponse(response=OpenApiTypes.OBJECT, description=why)
        responses[(code, media_type)] = OpenApiResponse(response=OpenApiTypes.STR, description=why)
    return extend_schema(parameters=[AuditExportQuerySerializer], responses=responses)


class AuditExportJsonLinesView(_AuditExportView):
    """The audit log as JSON lines (one row's object per line), oldest first. Platform admins."""

    renderer_classes = [JSONRenderer, JsonLinesRenderer]
    content_type = "application/x-ndjson"
    extension = "jsonl"

    @_schema("application/x-ndjson", "One JSON object per line")
    def get(self, request):
        return super().get(request)


class AuditExportCsvView(_AuditExportView):
    """The audit log as CSV (header first; `changes` as JSON text), oldest first. Platform admins."""

    renderer_classes = [JSONRenderer, CsvRenderer]
    content_type = "text/csv"
    extension = "csv"
    lines = staticmethod(csv_lines)

    @_schema("text/csv", "CSV, header first")
    def get(self, request):
        return super().get(request)
