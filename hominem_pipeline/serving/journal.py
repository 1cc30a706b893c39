"""Group commit for the interaction log: many requests' events written with one fsync.

`await journal.write(event)` returns once the event is on disk (True) or was already there (False).
While one write is being fsynced, events that arrive wait for the next one, so under load the log
writes a batch per disk sync instead of a sync per request, and a request is answered as soon as its
own batch is durable.
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
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((event, future))
        self._ids_in_flight[event["id"]] = future
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    written = await asyncio.to_thread(self.log.append, [e for e, _ in batch])
                except BaseException as exc:
                    for event, future in batch:
                        self._ids_in_flight.pop(event["id"], None)
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (event, future), new in zip(batch, written):
                    self._ids_in_flight.pop(event["id"], None)
                    if not future.done():
                        future.set_result(new)
        finally:
            self._flushing = False
