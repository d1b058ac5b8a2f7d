"""The API's one paging rule: limit/offset with bounds the database can hold.

DRF's LimitOffsetPagination takes any digits: `?limit=10**29` reached PostgreSQL as a LIMIT past
bigint (a DataError, and inside an enclosing transaction an aborted one). Here a page holds at
most MAX_LIMIT rows (a larger limit is cut to it, as DRF documents for max_limit) and an offset
past MAX_OFFSET is a 400 naming the parameter.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 10**9


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_offset(self, request) -> int:
        raw = request.query_params.get(self.offset_query_param, "")
        if raw.isascii() and raw.isdigit() and int(raw) > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"At most {MAX_OFFSET}."]})
        return super().get_offset(request)
