"""The one rule for finding an account by e-mail address (core.identity)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from core.identity import email_key, users_with_email


class TestEmailKey:
    @pytest.mark.parametrize(
        "a, b",
        [
            ("dana@example.org", "dana@EXAMPLE.ORG"),
            ("dana@Example.Org", "dana@example.org"),
            ("d.ana+ml@sub.example.org", "d.ana+ml@SUB.example.org"),
            ('"a@b"@example.org', '"a@b"@EXAMPLE.org'),  # the last "@" splits
        ],
    )
    def test_the_domain_ignores_ascii_case(self, a, b):
        assert email_key(a) == email_key(b)

    @pytest.mark.parametrize(
        "a, b",
        [
            ("Dana@example.org", "dana@example.org"),  # the local part is the mail host's: exact
            ("DANA@example.org", "dana@example.org"),
            ("dana@example.org", "dana@exampl\u212a.org"),  # Kelvin sign: lower-cases to "k" in Unicode
            ("dana@example.org", "dana@\u0435xample.org"),  # Cyrillic "е"
            ("d\u0131na@example.org", "dina@example.org"),  # dotless ı
            ("dana@example.org", "dana@example.org."),
            ("dana@example.org", " dana@example.org"),
        ],
    )
    def test_everything_else_is_exact(self, a, b):
        assert email_key(a) != email_key(b)


class TestUsersWithEmail:
    def test_finds_the_one_account_the_rule_names_and_no_look_alike(self, db):
        dana = User.objects.create_user("dana", "dana@example.org")
        capital = User.objects.create_user("capital-dana", "Dana@example.org")
        users = User.objects.all()
        assert users_with_email(users, "dana@EXAMPLE.org") == [dana]
        assert users_with_email(users, "Dana@example.ORG") == [capital]
        assert users_with_email(users, "DANA@example.org") == []
        assert users_with_email(users, "dana@exampl\u212a.org") == []
