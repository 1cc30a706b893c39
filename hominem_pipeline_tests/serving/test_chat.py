"""`hominem chat`: the student in the terminal, base or adapter, replies streamed as they are written."""

from __future__ import annotations

import os
import subprocess

from hominem_pipeline.testing.service import HOMINEM
from hominem_pipeline_tests.serving.conftest import make_adapter


def chat(project, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HOMINEM, "chat", "--config", "config/tiny.yaml", *args],
        cwd=project,
        env={**os.environ, "HOMINEM_HOME": str(project)},
        input=stdin or "",
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_streamed_pieces_join_to_the_reply_generate_gives(tiny_student):
    from hominem_pipeline.core.lm.generation import chat_text, generate, stream_reply
    from hominem_pipeline.core.lm.models import load_student

    model, tokenizer = load_student(tiny_student)
    said = "Tell me about the sea."
    pieces = list(stream_reply(model, tokenizer, [{"role": "user", "content": said}], max_new_tokens=12, seed=0))
    [whole] = generate(model, tokenizer, [chat_text(tokenizer, said)], max_new_tokens=12, seed=0)
    assert len(pieces) > 1 and "".join(pieces).strip() == whole.text  # greedy: the same reply, in pieces


def test_chat_talks_to_an_adapter_and_to_the_base(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    adapter = make_adapter(tiny_student, project / "adapter")
    scripted = chat(
        project,
        "--adapter",
        str(adapter),
        "-p",
        "Hello there",
        "-p",
        "/reset",
        "-p",
        "Hello there",
        "--max-tokens",
        "6",
        "--temperature",
        "0",
    )
    assert scripted.returncode == 0, scripted.stderr
    replies = [line for line in scripted.stdout.splitlines() if line.startswith("adapter> ")]
    assert (
        len(replies) == 2 and replies[0] == replies[1]
    )  # /reset: the same words in a new conversation, greedy: the same reply
    assert "a new conversation" in scripted.stderr
    piped = chat(project, "--adapter", "none", "--max-tokens", "6", stdin="Hi\n\n/quit\nnever read\n")
    assert piped.returncode == 0, piped.stderr
    assert [line.split("> ")[0] for line in piped.stdout.splitlines() if "> " in line] == [
        "base"
    ]  # the blank line skipped, /quit ends it


def test_chat_names_a_folder_that_is_not_an_adapter(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    (project / "empty").mkdir()
    refused = chat(project, "--adapter", "empty", "-p", "Hi")
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and "has no adapter_config.json" in message and "`latest`, or `none`" in message
