"""LOG_FORMAT=json (core.jsonlog): one JSON object per line, the audit stream alone on stdout."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from core.jsonlog import JsonFormatter

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import logging, django
django.setup()
logging.getLogger("audit").info("token.create auth.user:7", extra={"audit": {"action": "token.create", "id": 7}})
logging.getLogger("portal.x").warning("two\\nlines")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("portal.x").exception("failed")
logging.getLogger("portal.x").info("below LOG_LEVEL")
"""


def _run(**env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "LOG_LEVEL": "WARNING", **env}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )


def test_json_records_one_per_line_audit_on_stdout():
    done = _run(LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    [audit] = [json.loads(line) for line in done.stdout.splitlines()]
    assert audit["logger"] == "audit" and audit["level"] == "INFO"
    assert audit["audit"] == {"action": "token.create", "id": 7} and audit["message"] == "token.create auth.user:7"
    warning, failure = [json.loads(line) for line in done.stderr.splitlines()]
    assert (warning["message"], warning["level"]) == ("two\nlines", "WARNING")
    assert "ZeroDivisionError" in failure["exception"] and "audit" not in failure


def test_plain_is_the_default_and_a_bad_format_stops_start_up():
    done = _run()
    assert done.returncode == 0 and "INFO audit token.create auth.user:7" in done.stdout
    refused = _run(LOG_FORMAT="xml")
    assert refused.returncode != 0 and "LOG_FORMAT='xml' must be one of ['json', 'plain']" in refused.stderr


def test_values_that_are_not_json_are_written_as_text():
    record = logging.LogRecord("audit", logging.INFO, __file__, 1, "m %s", ("x",), None)
    record.audit = {"when": Path("/p")}
    assert json.loads(JsonFormatter().format(record))["audit"] == {"when": "/p"}
