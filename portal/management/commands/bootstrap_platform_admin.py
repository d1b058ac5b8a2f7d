"""`python manage.py bootstrap_platform_admin`: apply PLATFORM_ADMIN_USERNAME now (every `migrate`
does it too). Idempotent; never changes an existing password."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from portal.accounts import BootstrapError, platform_admin_bootstrap


class Command(BaseCommand):
    help = "Create the first platform admin from PLATFORM_ADMIN_USERNAME / _EMAIL / _PASSWORD_FILE."

    def handle(self, *args, **options) -> None:
        try:
            done = platform_admin_bootstrap()
        except BootstrapError as error:
            raise CommandError(str(error)) from None
        self.stdout.write({None: "Nothing to do.", "created": "Created.", "granted": "Made a platform admin."}[done])
