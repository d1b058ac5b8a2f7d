"""Logs as one JSON object per line (LOG_FORMAT=json), so a SIEM or a log shipper reads stdout
without parsing prose, and the LOGGING setting that wires it.

Every record becomes {"time", "level", "logger", "message"} plus, for the audit log's records
(core.models.audit), the row under "audit", and the traceback under "exception" when there is
one. Values that are not JSON are written as their str().
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

FORMATS = {"plain", "json"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        audit = getattr(record, "audit", None)
        if audit is not None:
            entry["audit"] = audit
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def logging_config(*, level: str, fmt: str) -> dict:
    """The LOGGING setting, plain or JSON: the portal's log on stderr, the audit stream alone on
    stdout (the `audit` logger, core.models), so a collector can take one without the other.

    The `audit` logger logs at INFO whatever LOG_LEVEL says: a security team's stream must not
    go quiet because the operators want fewer lines."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
            "json": {"()": "core.jsonlog.JsonFormatter"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": fmt},
            "audit": {"class": "logging.StreamHandler", "formatter": fmt, "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "audit": {"handlers": ["audit"], "level": "INFO", "propagate": False},
            # The API test server's access log drowns test output; it is not the portal's log.
            "aiohttp.access": {"level": "WARNING"},
            # A 4xx is an answer, not a fault: the access log has it, and Django would log each 403 / 404
            # with the exception's traceback. 5xx stay (ERROR, with the traceback, once).
            "django.request": {"level": "ERROR"},
            # Django's own console handler (DEBUG only) would print every record a second time beside root's.
            "django": {"handlers": [], "level": "INFO"},
        },
        "root": {"handlers": ["console"], "level": level},
    }
