"""The one integer parser for query and form parameters that no serializer or form field reads.

`str.isdigit()` is True for other scripts' digits and for superscripts: `int("١٢")` is 12 (a
different object than the one asked for) and `int("²")` raises (a 500). Python's `int()` also
takes spaces, underscores and a plus sign, and refuses more than 4,300 digits with a ValueError.
Here only ASCII digits with an optional leading minus count, within bounds the caller names;
anything else is a ParamError: a 400 naming the parameter, both in the API (a DomainError,
through core.exceptions.api_exception_handler) and in a page (a Django BadRequest).
"""

from __future__ import annotations

import re

from django.core.exceptions import BadRequest

from core.exceptions import DomainError

MAX_DIGITS = 19  # a bigint has at most 19 digits: a longer number is out of every range used here
ID_MAX = 2**63 - 1  # a primary key (BigAutoField) or a positive bigint column
_INTEGER = re.compile(r"(-?)([0-9]+)")


class ParamError(DomainError, BadRequest):
    """A query or form parameter is not a whole number within its bounds (always a 400)."""


def parse_int(
    value: object,
    *,
    name: str,
    minimum: int | None = 0,
    maximum: int = ID_MAX,
    default: int | None = None,
    cut: bool = False,
) -> int | None:
    """`value` (a parameter as received) as an int within [minimum, maximum]; `default` when it is
    missing or empty; with `cut`, a number above `maximum` is cut to it (a page size). Raises
    ParamError (field `name`) otherwise."""
    if value is None or value == "":
        return default
    match = _INTEGER.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ParamError("A whole number (digits 0-9).", field=name)
    sign, digits = match.groups()
    # Past MAX_DIGITS the number is beyond every bound; int() is never asked to read thousands of digits.
    number = int(value) if len(digits) <= MAX_DIGITS else (-maximum - 1 if sign else maximum + 1)
    if minimum is not None and number < minimum:
        raise ParamError(f"At least {minimum}.", field=name)
    if number > maximum:
        if cut:
            return maximum
        raise ParamError(f"At most {maximum}.", field=name)
    return number


def query_int(params, name: str, **bounds) -> int | None:
    """`parse_int` of one query or form parameter (request.GET, request.POST, query_params)."""
    return parse_int(params.get(name), name=name, **bounds)
