"""Group commit for the interaction log: many requests' events written with one fsync.

`await journal.write(event)` returns once the event is on disk (True) or was already there (False).
The first event of a batch schedules one flush on the event loop; every event that arrives before it
runs joins it, so under load the log writes a batch per disk sync instead of a sync per request. The
flush runs on the loop itself (a write and an fsync of a few kilobytes, well under a millisecond on a
local disk): handing it to a thread costs each request another pass of a busy loop to learn that its
batch is durable (1.9k instead of 1.5k posts a second under 200 clients here).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hominem_pipeline.core.online.log import InteractionLog


class Journal:
    def __init__(self, log: InteractionLog):
        self.log = log
        self._waiting: list[tuple[dict[str, Any], asyncio.Future]] = []
        self._flushing = False
        self._ids_in_flight: dict[str, asyncio.Future] = {}

    async def write(self, event: dict[str, Any]) -> bool:
        """Durably append `event`; True when written now, False when its id is already in the log."""
        if event["id"] in self.log:
            return False
        if (same := self._ids_in_flight.get(event["id"])) is not None:
            await asyncio.shield(same)  # the same id sent twice at once: one write, both acknowledged after it
            return False
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append((event, future))
        self._ids_in_flight[event["id"]] = future
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        return await asyncio.shield(future)

    def _flush(self) -> None:
        batch, self._waiting, self._flushing = self._waiting, [], False
        try:
            written = self.log.append([e for e, _ in batch])
        except BaseException as exc:
            for event, future in batch:
                self._ids_in_flight.pop(event["id"], None)
                if not future.done():
                    future.set_exception(exc)
            return
        for (event, future), new in zip(batch, written):
            self._ids_in_flight.pop(event["id"], None)
            if not future.done():
                future.set_result(new)
