"""docs/operations.md, "Backup and restore": the runbook's own pg_dump and pg_restore commands, run
on a filled portal database, give back the data the portal served at the backup.

The commands are read from the section's shell blocks (the one `pg_dump` and the one `pg_restore`
line) and run as written by bash, with DATABASE_URL and DUMP set as the runbook sets them, against
the real PostgreSQL of the tests (127.0.0.1:5432): the test database, filled and committed. After
the backup the data changes (a tenant added, one renamed, a deployment deleted, a key revoked),
then the restore runs in place, as the runbook does it (the portal stopped: no connection open).
What the API answers after the restore is what it answered at the backup, to a person signing in
with an API token (checked against the restored rows, not a session held in memory).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection, connections
from django.test import Client

from access.services import key_lookup, key_mint, key_revoke
from deployments.models import ModelDeployment
from deployments.services.revisions import deployment_approve, deployment_create
from portal.models import ApiToken
from quotas.models import Tenant
from tests.support.factories import draft

pytestmark = pytest.mark.django_db(transaction=True)

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SECTION = "## Backup and restore"
# What a person sees: the same answers before the backup and after the restore.
PAGES = ("/api/v1/tenants/", "/api/v1/deployments/", "/api/v1/keys/", "/api/v1/quotas/", "/api/v1/flavors/")


def runbook_commands() -> dict[str, str]:
    """The section's `pg_dump` and `pg_restore` command lines, exactly one of each."""
    text = RUNBOOK.read_text()
    assert SECTION in text, f"{RUNBOOK.name} has no '{SECTION}' section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S) for line in block.splitlines()]
    commands = {}
    for tool in ("pg_dump", "pg_restore"):
        (commands[tool],) = [line for line in lines if line.startswith(tool + " ")]
    return commands


def database_url() -> str:
    """The test database as a libpq URL (what DATABASE_URL holds in the cluster)."""
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    return f"postgresql://{quote(db['USER'], safe='')}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def run_runbook_line(line: str, dump: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "DATABASE_URL": database_url(), "DUMP": str(dump)}
    result = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"


def served(token: str) -> dict[str, object]:
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    answers = {}
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, (path, response.content[:500])
        answers[path] = response.json()
    return answers


def test_the_runbook_names_the_formats_it_relies_on() -> None:
    commands = runbook_commands()
    assert commands["pg_dump"].split()[1] == "-Fc"  # the custom format pg_restore reads
    assert {"--clean", "--if-exists", "--single-transaction"} <= set(commands["pg_restore"].split())


def test_the_runbooks_dump_and_restore_give_back_what_the_portal_served(tx_world, tmp_path) -> None:
    for tool in ("pg_dump", "pg_restore"):
        if shutil.which(tool) is None:
            message = f"{tool} is not installed (Debian: postgresql-client)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    commands = runbook_commands()
    world = tx_world
    member, admin = world.users["member"], world.users["platform_admin"]
    deployments = [
        deployment_create(tenant=world.alpha, user=member, data=draft(world, name=name, served_model_name=name))
        for name in ("llama-chat", "llama-batch")
    ]
    deployment_approve(deployment_id=deployments[0].pk, approver=admin, revision=1)
    key, plaintext = key_mint(user=member, tenant=world.alpha, name="ci", deployment_id=deployments[0].pk)
    _, token = ApiToken.objects.create(admin, name="ops")
    at_backup = served(token)
    assert [t["slug"] for t in at_backup["/api/v1/tenants/"]["results"]] == ["alpha", "beta"]
    assert sorted(d["name"] for d in at_backup["/api/v1/deployments/"]["results"]) == ["llama-batch", "llama-chat"]

    dump = tmp_path / "llm-portal.dump"
    run_runbook_line(commands["pg_dump"], dump)
    assert dump.read_bytes()[:5] == b"PGDMP"  # the custom format

    # What happens after the backup, and is lost by the restore.
    Tenant.objects.create(slug="gamma", display_name="Team Gamma")
    Tenant.objects.filter(pk=world.beta.pk).update(display_name="Team Beta (renamed)")
    ModelDeployment.objects.filter(pk=deployments[1].pk).delete()
    key_revoke(user=member, key_id=key.pk)
    assert served(token) != at_backup

    connections.close_all()  # the portal is stopped during the restore (the runbook scales it to 0)
    run_runbook_line(commands["pg_restore"], dump)

    assert served(token) == at_backup
    assert not Tenant.objects.filter(slug="gamma").exists()
    restored = key_lookup(plaintext)
    assert restored is not None and restored.pk == key.pk  # active again, as at the backup
