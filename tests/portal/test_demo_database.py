"""The demo runs on SQLite (scripts/demo, no PostgreSQL): every migration applies there, forward
and back, and the database rules the migrations add hold there too.

Caught by .ci/demo-smoke once: a PostgreSQL-only trigger (plpgsql) in quotas 0005 stopped the
demo's `migrate` with `near "FUNCTION": syntax error`, while every other test ran on PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.shared import PROJECT_ROOT

CHECK = """
import django
django.setup()
from django.core.management import call_command
from django.db import IntegrityError, transaction
call_command("migrate", verbosity=0)
from quotas.models import RetiredTenantSlug, Tenant
tenant = Tenant.objects.create(slug="zed", display_name="Zed")
try:
    with transaction.atomic():
        Tenant.objects.filter(pk=tenant.pk).update(slug="zed-two")
    print("rename allowed")
except IntegrityError:
    print("rename refused")
tenant.delete()
try:
    with transaction.atomic():
        Tenant.objects.create(slug="zed", display_name="Again")
    print("reuse allowed")
except IntegrityError:
    print("reuse refused")
print("retired", list(RetiredTenantSlug.objects.values_list("slug", flat=True)))
call_command("migrate", "quotas", "0004", verbosity=0)
call_command("migrate", verbosity=0)
print("migrated back and forth")
"""


def test_every_migration_applies_on_the_demos_sqlite_and_the_slug_rules_hold(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CI")}
    environment.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=PROJECT_ROOT, env=environment, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:5] == [
        "rename refused",
        "reuse refused",
        "retired ['zed']",
        "migrated back and forth",
        "",
    ], done.stdout
