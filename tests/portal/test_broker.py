"""The demo's file-system broker never hands a consumer a message that is still being written."""

from __future__ import annotations

from kombu import Connection
from kombu.transport import filesystem

from portal import broker


def _connection(tmp_path, transport):
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "store_processed": False,
        "control_folder": str(tmp_path / "control"),
    }
    return Connection("filesystem://localhost/", transport=transport, transport_options=options)


def _consume_while_writing(tmp_path, monkeypatch, transport):
    """Put one message; at the moment the producer locks its file (before the payload is written),
    a second channel on the same folder takes what it can see."""
    conn = _connection(tmp_path, transport)
    producer, consumer = conn.channel(), conn.channel()
    real_lock = filesystem.lock
    seen = []

    def lock_then_consume(f, flags):
        real_lock(f, flags)
        try:
            seen.append(consumer._get("celery"))
        except Exception as exc:  # noqa: BLE001 - what the consumer got is the result
            seen.append(exc)

    monkeypatch.setattr(filesystem, "lock", lock_then_consume)
    producer._put("celery", {"body": "hello"})
    monkeypatch.setattr(filesystem, "lock", real_lock)
    return seen, consumer


def test_a_consumer_never_sees_a_message_before_it_is_whole(tmp_path, monkeypatch):
    from queue import Empty

    seen, consumer = _consume_while_writing(tmp_path, monkeypatch, broker.Transport)
    assert len(seen) == 1 and isinstance(seen[0], Empty), seen
    assert consumer._get("celery") == {"body": "hello"}
    assert consumer._size("celery") == 0


def test_kombus_own_channel_shows_the_race_this_transport_closes(tmp_path, monkeypatch):
    """The reason for portal/broker.py: with the stock channel the consumer reads an empty file."""
    seen, _ = _consume_while_writing(tmp_path, monkeypatch, filesystem.Transport)
    assert len(seen) == 1 and isinstance(seen[0], ValueError), seen  # JSONDecodeError
