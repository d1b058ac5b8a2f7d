"""The demo's server-less Celery broker: kombu's file-system transport, with whole messages only.

kombu 5.x's file-system channel (`kombu/transport/filesystem.py`, `Channel._put`) creates the
message file under its final name and only then locks it and writes the payload; its `_get` lists
the folder, moves the oldest file for the queue away and reads it without taking that lock. A
consumer that lists the folder between the create and the write takes an empty message and fails
with `JSONDecodeError: Expecting value` (seen in CI, in the demo's worker log). Here a message is
written under a name no consumer picks up (`_get`, `_size` and `_purge` all compare the part after
the first dot with `<queue>.msg`) and renamed to its final name once complete: a rename within one
folder is atomic, so a consumer sees a whole message or none.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes

PARTIAL_SUFFIX = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL_SUFFIX
        data = str_to_bytes(filesystem.dumps(payload))
        try:
            with open(partial, "wb", buffering=0) as f:
                filesystem.lock(f, filesystem.LOCK_EX)
                try:
                    f.write(data)
                finally:
                    filesystem.unlock(f)
            os.replace(partial, final)
        except OSError as exc:
            try:
                os.remove(partial)
            except OSError:
                pass
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
