"""The engine: batches of requests with one sampling setting, and a bounded queue that says when to retry."""

import threading

import pytest

from hominem_pipeline.serving.engine import Engine, EngineSettings, QueueFull, Request, Sampling


@pytest.fixture(scope="module")
def engine(tiny_student):
    engine = Engine(
        tiny_student,
        None,
        None,
        EngineSettings(max_batch_size=4, batch_wait_ms=50, max_queue=3, repetition_penalty=1.0),
    )
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


def test_continuous_batching_writes_what_generate_writes_alone_and_rows_join_mid_flight(engine, tiny_student):
    """Greedy replies of rows of different prompt lengths, batched, some joining while others are halfway,
    equal `generate`'s for each prompt alone: the left-padded cache merge changes nothing."""
    from hominem_pipeline.core.lm.generation import generate
    from hominem_pipeline.core.lm.models import load_student

    model, tokenizer = load_student(tiny_student)
    prompts = ["hi", "tell me a long story about a dragon and a knight", "why?"]
    alone = [
        generate(
            model,
            tokenizer,
            [engine.chat_text([{"role": "user", "content": p}])],
            max_new_tokens=10,
            seed=0,
            repetition_penalty=1.0,
        )[0].text
        for p in prompts
    ]
    first = Request(engine.chat_text([{"role": "user", "content": prompts[0]}]), Sampling(0.0, 1.0, 10), adapter=False)
    joined_at = []
    later = [
        Request(engine.chat_text([{"role": "user", "content": p}]), Sampling(0.0, 1.0, 10), adapter=False)
        for p in prompts[1:]
    ]

    def join_when_started(delta: str) -> None:
        if not joined_at:  # the first row has its first token: the others arrive now
            joined_at.append(len(first.ids))
            for r in later:
                engine.submit(r)

    first.on_text = join_when_started
    engine.submit(first).result(timeout=60)
    got = [first.sent] + [r.future.result(timeout=60).sent for r in later]
    assert joined_at and [g.strip() for g in got] == alone


def test_a_seeded_sampled_reply_is_the_same_whoever_shares_its_batch(engine):
    text = engine.chat_text([{"role": "user", "content": "say something"}])
    alone = engine.submit(Request(text, Sampling(0.9, 0.9, 8, seed=7), adapter=False)).result(timeout=60)
    crowd = [Request(text, Sampling(0.9, 0.9, 8, seed=s), adapter=False) for s in (1, 7, 3)]
    for r in crowd:
        engine.submit(r)
    assert crowd[1].future.result(timeout=60).ids == alone.ids


def test_the_repetition_penalty_is_transformers_own(tiny_student):
    """With the service's penalty (1.1 by default; 1.5 here, to make it bite) a greedy reply equals `generate`'s."""
    from hominem_pipeline.core.lm.generation import generate
    from hominem_pipeline.core.lm.models import load_student

    engine = Engine(
        tiny_student,
        None,
        None,
        EngineSettings(max_batch_size=2, batch_wait_ms=0, max_queue=2, repetition_penalty=1.5),
    )
    try:
        text = engine.chat_text([{"role": "user", "content": "repeat after me: la la la"}])
        got = engine.submit(Request(text, Sampling(0.0, 1.0, 12), adapter=False)).result(timeout=60).sent
    finally:
        engine.close()
    model, tokenizer = load_student(tiny_student)
    assert got.strip() == generate(model, tokenizer, [text], max_new_tokens=12, seed=0, repetition_penalty=1.5)[0].text


@pytest.fixture(scope="module")
def emoji_student(tiny_student, tmp_path_factory):
    """The tiny student with one emoji piece's embedding set along its last state for "hello": its greedy
    reply opens with that emoji piece."""
    import torch

    from hominem_pipeline.core.lm.generation import chat_text, symbol_token_ids
    from hominem_pipeline.core.lm.models import load_student

    model, tokenizer = load_student(tiny_student)
    piece = tokenizer("🙂", add_special_tokens=False)["input_ids"][0]
    assert piece in symbol_token_ids(tokenizer) and not set(
        tokenizer("Hello there", add_special_tokens=False)["input_ids"]
    ) & set(symbol_token_ids(tokenizer))
    enc = tokenizer([chat_text(tokenizer, "hello")], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        last = model(**enc, output_hidden_states=True).hidden_states[-1][0, -1]  # after the final norm
        model.get_input_embeddings().weight[piece] = 1000 * last / last.norm() ** 2
    path = tmp_path_factory.mktemp("emoji-student")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, piece


def test_plain_start_keeps_an_emoji_from_opening_a_reply_in_generate_and_in_the_engine(emoji_student):
    from hominem_pipeline.core.lm.generation import chat_text, decoding_settings
    from hominem_pipeline.core.lm.models import load_student

    path, piece = emoji_student
    model, tokenizer = load_student(path)
    enc = tokenizer([chat_text(tokenizer, "hello")], return_tensors="pt", add_special_tokens=False)

    def first(plain):
        out = model.generate(**enc, **decoding_settings(tokenizer, 3, None, None, 1.0, plain))
        return int(out[0, enc["input_ids"].shape[1]])

    assert first(plain=False) == piece  # the rigged student opens with the emoji piece
    assert first(plain=True) != piece
    for plain in (False, True):
        engine = Engine(
            path,
            None,
            None,
            EngineSettings(max_batch_size=1, batch_wait_ms=0, max_queue=1, repetition_penalty=1.0, plain_start=plain),
        )
        try:
            reply = engine.submit(
                Request(engine.chat_text([{"role": "user", "content": "hello"}]), Sampling(0.0, 1.0, 3), adapter=False)
            ).result(timeout=60)
        finally:
            engine.close()
        assert (reply.ids[0] == piece) is not plain


def test_a_hot_swap_changes_new_requests_only_and_refuses_a_bad_adapter(tiny_student, tmp_path):
    """swap: a request running when the swap comes finishes on the adapter it started with (its reply
    equals an unswapped run's); requests after it run on the new adapter; a damaged or foreign adapter
    is refused and the old one keeps serving; a swapped-out adapter is unloaded once unused."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from hominem_pipeline.core.online.live import BadAdapter
    from hominem_pipeline_tests.serving.conftest import make_adapter

    engine = Engine(
        tiny_student,
        None,
        None,
        EngineSettings(max_batch_size=4, batch_wait_ms=0, max_queue=8, repetition_penalty=1.0),
    )
    try:
        checksum = engine.base_checksum()
        good = make_adapter(tiny_student, tmp_path / "good")
        (good / "METADATA.json").write_text(json.dumps({"base_checksum": checksum}))
        text = engine.chat_text([{"role": "user", "content": "tell me a story"}])

        def ask(n):
            return engine.submit(Request(text, Sampling(0.0, 1.0, n), adapter=True))

        base_reply = ask(24).result(timeout=60)
        assert base_reply.adapter_label is None and engine.adapter_label is None  # nothing loaded yet: the base

        gate = threading.Event()
        running = engine.submit(Request(text, Sampling(0.0, 1.0, 24), adapter=True, on_text=lambda _: gate.set()))
        assert gate.wait(60)  # the row is generating
        seconds = engine.swap(good, "good").result(timeout=60)
        after = ask(24).result(timeout=60)
        assert (
            running.result(timeout=60).sent == base_reply.sent and running.result().adapter_label is None
        )  # finished on the base
        assert (
            after.adapter_label == "good"
            and after.sent != base_reply.sent
            and engine.adapter_label == "good"
            and seconds < 30
        )

        nan = tmp_path / "nan"
        nan.mkdir()
        for f in good.iterdir():
            (nan / f.name).write_bytes(f.read_bytes())
        tensors = load_file(str(good / "adapter_model.safetensors"))
        tensors = {k: torch.full_like(v, float("nan")) for k, v in tensors.items()}
        save_file(tensors, str(nan / "adapter_model.safetensors"))
        with pytest.raises(BadAdapter, match="NaN"):
            engine.swap(nan, "nan")
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        for f in good.iterdir():
            (foreign / f.name).write_bytes(f.read_bytes())
        (foreign / "METADATA.json").write_text(json.dumps({"base_checksum": "0" * 64}))
        with pytest.raises(BadAdapter, match="another base"):
            engine.swap(foreign, "foreign")
        assert ask(24).result(timeout=60).sent == after.sent and engine.adapter_label == "good"  # still the good one

        second = tmp_path / "second"
        make_adapter(tiny_student, second)
        (second / "METADATA.json").write_text(json.dumps({"base_checksum": checksum}))
        engine.swap(second, "second").result(timeout=60)
        assert ask(4).result(timeout=60).adapter_label == "second"
        assert len(engine.model.peft_config) == 1  # "good" unloaded once nothing ran on it
        engine.swap(None, None).result(timeout=60)  # back to the base
        assert ask(24).result(timeout=60).sent == base_reply.sent
    finally:
        engine.close()


def test_the_engine_puts_what_the_person_stated_earlier_back_before_their_last_message(engine, tiny_student):
    """serving.recall_facts: every request's conversation goes through `chat_text`, which repeats the
    person's earlier statements about themselves in their words (the log keeps what was said)."""
    said = [
        {"role": "user", "content": "Hi, my name is Ana."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is my name?"},
    ]
    recalling = Engine(
        tiny_student,
        None,
        None,
        EngineSettings(max_batch_size=1, batch_wait_ms=0, max_queue=1, repetition_penalty=1.0, recall_facts=True),
    )
    try:
        text = recalling.chat_text(said)
    finally:
        recalling.close()
    last = text.rsplit("<|im_start|>user\n", 1)[1]
    assert "my name is Ana." in last and last.index("my name is Ana.") < last.index("What is my name?")
    assert engine.chat_text(said).count("Ana") == 1 and said[-1]["content"] == "What is my name?"
