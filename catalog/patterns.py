"""Source patterns of a tenant's model allow-list: one glob per line, e.g. `meta-llama/*` or
`s3://team-bucket/*`. Kept here, beside the source syntax they are held to, so the policy form,
the API and quotas.policy read one rule.

`*` matches any run of characters ('/' included: `s3://team-bucket/*` covers every key under
the bucket) and `?` one character; nothing else is special. Matching is case-sensitive and on
the whole source.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

PATTERNS_MAX = 50
PATTERN_MAX = 300
_PATTERN_CHARS = re.compile(r"^[A-Za-z0-9._/:=*?-]+$")


def pattern_error(pattern: str) -> str | None:
    """Why `pattern` is not a source pattern, or None."""
    if len(pattern) > PATTERN_MAX:
        return f"At most {PATTERN_MAX} characters."
    if not _PATTERN_CHARS.fullmatch(pattern):
        return "Letters, digits and . _ / : = - plus the wildcards * and ? only (no spaces, brackets or '%')."
    if ".." in pattern:
        return "No '..' in a pattern: a source never contains it."
    scheme, has_scheme, rest = pattern.partition("://")
    if has_scheme and scheme not in ("s3", "pvc"):
        return "A pattern with a scheme starts s3:// or pvc://."
    if ":" in (rest if has_scheme else pattern):
        return "':' only in s3:// or pvc://."
    return None


def clean_patterns(value) -> tuple[list[str], str | None]:
    """(patterns, error): a list of strings or text with one pattern per line, stripped, blank
    lines and repeats dropped, in the order given; `error` names the first bad line."""
    lines = value.splitlines() if isinstance(value, str) else value
    if not isinstance(lines, list | tuple) or not all(isinstance(line, str) for line in lines):
        return [], "A list of patterns (strings)."
    patterns: list[str] = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line in patterns:
            continue
        if problem := pattern_error(line):
            return [], f"Line {number} ({line[:60]!r}): {problem}"
        patterns.append(line)
    if len(patterns) > PATTERNS_MAX:
        return [], f"At most {PATTERNS_MAX} patterns."
    return patterns, None


def matching(source: str, patterns: list[str]) -> str | None:
    """The first pattern that matches `source` as a whole, or None."""
    return next((p for p in patterns if fnmatchcase(source, p)), None)
