"""Every parser of outside input, fed random and truncated bytes: only the project's own clear errors
come out (or a result), never a library's raw exception.

The parsers: imported preference files (HH-RLHF, JSONL, gzipped, Parquet), a hosted teacher's replies
(the JSON object in its text, the label in the object) and config overlays."""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hominem_pipeline.core.common.schema import Trajectory
from hominem_pipeline.core.config import ConfigError
from hominem_pipeline.core.human.preferences import PreferenceImportError, check_importable
from hominem_pipeline.core.teacher.api import label_from_answer
from hominem_pipeline.core.teacher.providers import parse_json_object

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DIMS = ["empathy", "honesty"]
GOOD_ROW = {"prompt": "Is the stove off?", "chosen": "Let's check together.", "rejected": "Probably."}
GOOD_HH = {
    "chosen": "\n\nHuman: Is the stove off?\n\nAssistant: Let's check together.",
    "rejected": "\n\nHuman: Is the stove off?\n\nAssistant: Probably.",
}


def _valid_bytes(fmt: str, suffix: str) -> bytes:
    """A small valid file of `fmt`, as bytes (to be cut or mangled)."""
    if suffix == ".parquet":
        buffer = io.BytesIO()
        pd.DataFrame([GOOD_ROW] * 3).to_parquet(buffer)
        return buffer.getvalue()
    text = "".join(json.dumps(GOOD_HH if fmt == "hh-rlhf" else GOOD_ROW) + "\n" for _ in range(3)).encode()
    return gzip.compress(text) if suffix.endswith(".gz") else text


def _import(data: bytes, fmt: str, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"pairs{suffix}"
        path.write_bytes(data)
        try:
            parsed = check_importable(path, fmt)
        except PreferenceImportError as exc:
            assert str(path) in str(exc)  # the message names the file
            return
        assert len(parsed.pairs) >= 1


FILES = st.sampled_from(
    [
        ("hh-rlhf", ".jsonl"),
        ("hh-rlhf", ".jsonl.gz"),
        ("jsonl", ".jsonl"),
        ("jsonl", ".jsonl.gz"),
        ("parquet", ".parquet"),
    ]
)


@FUZZ
@given(kind=FILES, data=st.binary(max_size=400))
def test_random_bytes_as_a_preference_file(kind, data):
    _import(data, *kind)


@FUZZ
@given(kind=FILES, cut=st.floats(0, 1), flip=st.integers(0, 255), at=st.floats(0, 1))
@example(kind=("parquet", ".parquet"), cut=1.0, flip=128, at=0.0546875)  # a string's bytes no longer UTF-8
def test_truncated_or_mangled_preference_files(kind, cut, flip, at):
    whole = bytearray(_valid_bytes(*kind))
    whole[int(at * (len(whole) - 1))] ^= flip  # one byte changed
    _import(bytes(whole[: int(cut * len(whole))]), *kind)


TRAJECTORY = Trajectory(
    trajectory_id="t",
    prompt_id="p",
    prompt="Hi",
    category="c",
    difficulty=1,
    candidate_index=0,
    style="s",
    temperature=0.7,
    top_p=0.9,
    response="Hello",
    new_tokens=1,
    finished=True,
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)


@FUZZ
@given(
    text=st.text(max_size=300)
    | st.builds(lambda v: json.dumps(v), JSONISH)
    | st.sampled_from(
        ["[" * 5000, '{"a":' * 3000 + "1" + "}" * 3000, '{"a": ' + "[" * 5000 + "]" * 5000 + "}", "```json\n{]}\n```"]
    )
)
def test_teacher_replies_give_an_object_or_a_reason(text):
    data, reason = parse_json_object(text)
    assert (data is None) != (reason is None) and (data is None or isinstance(data, dict))


@FUZZ
@given(
    data=JSONISH
    | st.fixed_dictionaries(
        {
            "rationale": JSONISH,
            "vector": st.dictionaries(st.sampled_from(DIMS + ["other"]), JSONISH),
            "scalar": JSONISH,
            "reward_intensity": JSONISH,
            "safety_score": JSONISH,
        }
    )
)
def test_teacher_answers_give_a_label_or_the_problems(data):
    label, problems = label_from_answer(data, TRAJECTORY, DIMS)
    assert (label is None) == bool(problems) and all(isinstance(p, str) for p in problems)


@FUZZ
@given(
    data=st.binary(max_size=300)
    | st.builds(lambda s: s.encode(), st.text(max_size=300))
    | st.sampled_from([b"policy:\n  beta: [", b"policy: {beta: -1}", b"- a\n- b", b"\xff\xfe"])
)
def test_config_overlays_give_a_config_or_a_config_error(data):
    from hominem_pipeline.core.config.loader import load_config

    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp) / "overlay.yaml"
        overlay.write_bytes(data)
        try:
            load_config(overlay)
        except ConfigError as exc:
            assert "overlay.yaml" in str(exc) or "=" in str(exc) or ":" in str(exc)
