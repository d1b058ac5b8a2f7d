"""Secrets out of text the portal shows people: engine logs and Kubernetes Events.

Three nets, each complete for what it covers, applied to the original text and their findings
merged, so that what one pattern consumed can never hide a secret from another:

1. exact values the caller knows (the keys a local engine was given);
2. shapes that are secrets wherever they stand: the portal's own keys (`runtime.keys.KEY_SHAPE`),
   Hugging Face and OpenAI-style tokens;
3. whatever follows a credential's *name*, whole: an `--api-key` flag's every argument up to the
   next flag; an `api_key`/`API_KEY`/`x-api-key` field's list, tuple, set, quoted string, comma
   list or YAML list on the lines below; a `Bearer` credential; any NAME=value or NAME: value whose
   name says it is a token, secret, password or access key.

Values are taken to be RFC 6750 token68 (letters, digits, `-._~+/`, then `=`), as bearer
credentials are: none of the delimiters a bare value stops at (whitespace, quotes, `,;()[]{}<>`)
can be part of one. Over-redaction is accepted; a missed key is not (tests/runtime/test_redaction.py
tries keys in random formats and positions).
"""

from __future__ import annotations

import re

from runtime.keys import KEY_SHAPE

REDACTED = "[redacted]"

_BARE = r"""[^\s'"`,;()\[\]{}<>]+"""
_QUOTED = r"""'[^'\n]*'|"[^"\n]*"|`[^`\n]*`"""
_ITEM = rf"(?:{_QUOTED}|{_BARE})"
# A bracketed value runs to its closing bracket, across lines (an indented JSON list), or to the end.
_GROUP = r"\[[^\]]*(?:\]|\Z)|\([^)]*(?:\)|\Z)|\{[^}]*(?:\}|\Z)"
_YAML_LIST = rf"(?:\n[ \t]*-[ \t]+{_ITEM})+"
_NOT_A_NAME = r"(?![ \t]*[:=])"  # an item followed by ':' or '=' is the next field's name
_ARG_SEP = r"(?:[ \t]*,[ \t]*|[ \t]+)"  # between arguments: a command line's spaces, a list's commas
# Names are short: bounded repeats keep every pattern linear in the text (no backtracking over a
# long run of word characters, which a 512 KiB log may hold).
_API_KEY_NAME = r"api[-_ ]?keys?[\w-]{0,40}"
# The credential word ends the name or is followed by "_…": `max_num_batched_tokens` is not one.
# What stands before the word does not matter (HF_TOKEN, X_TOKEN), so the match starts at it.
_CREDENTIAL_NAME = r"(?:TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)(?:_[A-Z0-9]+){0,8}"
# A list's next item is not (nor ends in) the next credential's name: "a, api_keys=('b',)" and
# "a, :api_keys=('b',)" are a list of one, then another field. A bare item may end in "=", as
# base64 padding does, so "api_keys=" would pass as an item, and the tuple after it would hide
# from the pattern that names it (tests/runtime/test_redaction.py found it).
_NEXT_NAME = rf"""(?![^\s'"`,;()\[\]{{}}<>]{{0,40}}?(?:{_API_KEY_NAME}|{_CREDENTIAL_NAME})['"`]?[ \t]*(?:=>|[:=]))"""

_SHAPES = (
    KEY_SHAPE,
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
)
# Group 1 of each is the value to remove; the name before it stays, to show what was there.
_VALUES = (
    # --api-key a b c, --api_key=a, --openai-api-key 'a', ['--api-key', 'a', 'b'] (argv as a list):
    # every argument up to the next flag.
    re.compile(
        rf"""(?i)(?<=-){_API_KEY_NAME}(?:=|['"`]?{_ARG_SEP})"""
        rf"""((?:{_GROUP}|{_ITEM})(?:{_ARG_SEP}(?!['"`]?--){_NEXT_NAME}{_ITEM}{_NOT_A_NAME})*)"""
    ),
    # 'api_key': ['a', 'b'], api_key=('a',), "api-key": "a", VLLM_API_KEY=a,b, api-key:\n  - a,
    # "Invalid API key: a", :api_key => 'a'
    re.compile(
        rf"""(?i)(?:{_API_KEY_NAME}|{_CREDENTIAL_NAME})['"`]?[ \t]*(?:=>|[:=])[ \t]*"""
        rf"({_GROUP}|{_YAML_LIST}|{_ITEM}(?:[ \t]*,[ \t]*{_NEXT_NAME}{_ITEM}{_NOT_A_NAME})*)"
    ),
    re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/=\-]+)"),
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with every secret the nets find (and each exact value in `secrets`) replaced."""
    spans = [m.span() for value in secrets if value and len(value) >= 4 for m in re.finditer(re.escape(value), text)]
    spans += [m.span() for pattern in _SHAPES for m in pattern.finditer(text)]
    spans += [m.span(1) for pattern in _VALUES for m in pattern.finditer(text)]
    out, at = [], 0
    for start, end in _merged(spans):
        out += [text[at:start], REDACTED]
        at = end
    return "".join(out) + text[at:]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching spans as one (a value found by two nets is replaced once)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[0] < s[1]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
