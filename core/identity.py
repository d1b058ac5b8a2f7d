"""Who an e-mail address names: the one matching rule for finding an account by address.

The rule: two addresses are the same when their local parts (before the last "@") are equal
character for character, and their domains are equal ignoring the case of the ASCII letters A–Z
only. Why:

- DNS names are case-insensitive in ASCII (RFC 4343), so `Example.ORG` and `example.org` are
  one mail domain, and Django's `normalize_email` already lower-cases the domain of addresses it
  stores.
- The local part belongs to the receiving host, which may treat case as significant (RFC 5321
  §2.4): `Dana@example.org` and `dana@example.org` can be two mailboxes held by two people, so
  folding them together would let one sign in as the other.
- No Unicode case folding anywhere: it maps distinct characters together (the Kelvin sign "K"
  lower-cases to "k", dotless "ı" upper-cases to "I"), which is exactly how look-alike addresses
  would pass as someone else's.

Everything that finds a person by address (the OpenID sign-in, adding a member by e-mail) asks
`users_with_email`; nothing else compares addresses.
"""

from __future__ import annotations

from django.db.models import QuerySet

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def email_key(address: str) -> str:
    """The form two addresses are compared in: the local part as is, the domain's ASCII letters
    lower-cased. An address without "@" is compared as a whole, exactly."""
    local, at, domain = address.rpartition("@")
    if not at:
        return address
    return f"{local}@{domain.translate(_ASCII_LOWER)}"


def users_with_email(users: QuerySet, address: str) -> list:
    """The users of `users` whose address is `address` under the rule above."""
    wanted = email_key(address)
    # `iexact` finds every candidate (equal under the rule implies equal ignoring all case);
    # the rule itself is applied here, exactly.
    return [user for user in users.filter(email__iexact=address) if email_key(user.email) == wanted]
