"""The engine: batches of requests with one sampling setting, and a bounded queue that says when to retry."""

import threading

import pytest

from hominem_pipeline.serving.engine import Engine, QueueFull, Request, Sampling


@pytest.fixture(scope="module")
def engine(tiny_student):
    engine = Engine(tiny_student, None, None, max_batch_size=4, batch_wait_ms=50, max_queue=3, repetition_penalty=1.0)
    yield engine
    engine.close()


def test_a_full_queue_refuses_with_a_retry_time_and_loses_nothing_it_accepted(engine):
    gate = threading.Event()
    blocker = engine.run(gate.wait)  # the worker is busy: requests wait in the queue
    text = engine.chat_text([{"role": "user", "content": "hello"}])
    accepted = [Request(text, Sampling(0.0, 1.0, 4), adapter=False) for _ in range(3)]
    futures = [engine.submit(r) for r in accepted]
    with pytest.raises(QueueFull, match="3 requests are waiting") as info:
        engine.submit(Request(text, Sampling(0.0, 1.0, 4), adapter=False))
    assert info.value.retry_after >= 1
    gate.set()
    blocker.result(timeout=30)
    done = [f.result(timeout=60) for f in futures]
    assert all(len(r.ids) == 4 and r.finish_reason == "length" for r in done)
    assert len({r.sent for r in done}) == 1  # greedy: one batch, the same reply for the same conversation
    assert engine.largest_batch == 3


def test_streamed_text_adds_up_to_the_reply_and_a_cancelled_row_stops(engine):
    text = engine.chat_text([{"role": "user", "content": "tell me a story"}])
    pieces = []
    streamed = Request(text, Sampling(0.0, 1.0, 12), adapter=False, on_text=pieces.append)
    cancelled = Request(text, Sampling(0.0, 1.0, 12), adapter=False)
    cancelled.cancelled = True
    a, b = engine.submit(streamed), engine.submit(cancelled)
    assert a.result(timeout=60) is streamed and len(streamed.ids) == 12
    assert "".join(pieces) == streamed.sent and len(pieces) > 1
    assert b.result(timeout=60).finish_reason == "cancelled" and len(cancelled.ids) <= 1
