"""Domain errors and how they surface: 400/409 in the API, a message in the UI."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class DomainError(Exception):
    """A business rule refused the operation. `field` names the input at fault, if any."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code

    def as_dict(self) -> dict:
        if self.field:
            return {self.field: [self.message], "code": self.code}
        return {"detail": self.message, "code": self.code}


class ConflictError(DomainError):
    """The object changed under us (another admin decided first, a state moved on)."""

    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class TransitionError(ConflictError):
    """The requested lifecycle transition is not allowed from the current state."""

    code = "invalid_transition"


class QuotaExceeded(DomainError):
    """Not enough GPUs left in the tenant's quota."""

    code = "quota_exceeded"


def api_exception_handler(exc, context):
    """DRF handler that also understands DomainError and Django's ValidationError."""
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status_code)
    if isinstance(exc, DataError):
        # Input the database cannot hold or compare (a NUL byte in a slug lookup, a number beyond
        # its column): the request is at fault, and the transaction that met it rolled back.
        return Response(
            {"detail": "A value in the request cannot be stored or looked up.", "code": "invalid"},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, RequestDataTooBig):
        # Django's own answer is an HTML 400 page; an API client gets JSON and the limit.
        return Response(
            {
                "detail": f"Request body too large: the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
                "code": "request_too_large",
            },
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):
        return Response(
            {"detail": f"Too many fields in the request: {exc}", "code": "too_many_fields"},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    return exception_handler(exc, context)


class Forbidden(DomainError):
    """The actor's role does not allow this."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "permission_denied"
