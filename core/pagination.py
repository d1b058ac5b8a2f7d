"""The API's one paging rule: limit/offset with bounds the database can hold.

DRF's LimitOffsetPagination takes any digits: `?limit=10**29` reached PostgreSQL as a LIMIT past
bigint (a DataError, and inside an enclosing transaction an aborted one). Here a page holds at
most MAX_LIMIT rows (a larger limit is cut to it, as DRF documents for max_limit) and an offset
past MAX_OFFSET, like any value that is not a whole number in range, is a 400 naming the parameter.
"""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

from core.params import query_int

MAX_LIMIT = 1000
MAX_OFFSET = 10**9


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    # Both through core.params, the one integer parser: junk, other scripts' digits and negatives
    # are a 400 naming the parameter (DRF fell back to its default on some and not on others).
    def get_limit(self, request) -> int | None:
        name = self.limit_query_param
        return query_int(request.query_params, name, minimum=1, maximum=self.max_limit, cut=True) or self.default_limit

    def get_offset(self, request) -> int:
        return query_int(request.query_params, self.offset_query_param, minimum=0, maximum=MAX_OFFSET, default=0)
