"""Strict environment helpers: a bad value stops the process with a message naming the variable.

django-environ parses URLs (databases, caches); these wrappers refuse what it would silently
coerce (``DEBUG=yes please`` becoming False, ``WORKERS=ten`` becoming a crash deep in Celery).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import environ
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None else value.strip()


def env_bool(name: str, default: bool) -> bool:
    """A boolean; only 1/0, true/false, yes/no, on/off (any case) are accepted."""
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer within optional bounds."""
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """A finite float within an optional lower bound."""
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    return number


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    """A string; `required` refuses a missing or empty value."""
    value = _raw(name)
    if not value:
        if required:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; empty items are refused (they are usually typos)."""
    value = _raw(name)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"{name}={value!r} has an empty item")
    return items


def env_choice(name: str, default: str, choices: set[str]) -> str:
    """One of a fixed set of strings."""
    value = _raw(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of {sorted(choices)}")
    return value


def env_url(name: str, default: str | None, *, schemes: set[str]) -> str | None:
    """A URL whose scheme is one of `schemes`."""
    value = _raw(name) or default
    if value is None:
        return None
    parsed = urlparse(value)
    if parsed.scheme not in schemes:
        raise ImproperlyConfigured(f"{name}={value!r} has scheme {parsed.scheme!r}; expected one of {sorted(schemes)}")
    return value


def env_database(name: str, default: str) -> dict:
    """A database URL parsed by django-environ; only PostgreSQL and SQLite are supported."""
    url = env_url(name, default, schemes={"postgres", "postgresql", "pgsql", "sqlite"})
    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # environ raises bare exceptions on malformed URLs
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from None
    if config["ENGINE"].endswith("postgresql") and not config.get("NAME"):
        raise ImproperlyConfigured(f"{name} names no database")
    return config
