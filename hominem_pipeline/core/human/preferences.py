"""Importing human preference pairs: HH-RLHF transcripts, or prompt/chosen/rejected rows (JSONL, Parquet).

`hominem data import-preferences PATH --format F --date D` copies the file into the partition's inbox
(`data/inbox/human_preferences/<date>/`, named by its sha256, so importing the same file twice is a
no-op) and materializes the `human_preferences` asset, which parses every file of its inbox with
`parse_preference_file`: good rows become pairs, bad rows go to a quarantine table with the reason.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.pipeline.artifacts import file_sha256, fingerprint

FORMATS = ("hh-rlhf", "jsonl", "parquet")
ASSISTANT = "\n\nAssistant:"
# tag: the quality the pair tests (`core.common.tags`; a dimension's name makes the pair supervise that dimension), or
# None
HUMAN_PAIR_COLUMNS = [
    "pair_id",
    "prompt_id",
    "prompt",
    "chosen",
    "rejected",
    "tag",
    "source",
    "source_file",
    "source_row",
]
QUARANTINE_COLUMNS = ["source_file", "source_row", "reason", "raw"]


class PreferenceImportError(ValueError):
    """A preference file cannot be imported at all (missing, unknown format, unreadable)."""


@dataclass(frozen=True)
class ParsedFile:
    pairs: pd.DataFrame
    quarantine: pd.DataFrame


def split_hh_rlhf(chosen: str, rejected: str) -> tuple[str, str, str]:
    """(prompt, chosen reply, rejected reply) of one HH-RLHF pair. The prompt is the shared dialogue up
    to and including the last "\\n\\nAssistant:"; raises ValueError when the pair does not have that shape."""
    if not isinstance(chosen, str) or not isinstance(rejected, str):
        raise ValueError("`chosen` and `rejected` must both be strings")
    cut = chosen.rfind(ASSISTANT)
    if cut < 0:
        raise ValueError("no '\\n\\nAssistant:' turn in `chosen`")
    prompt = chosen[: cut + len(ASSISTANT)]
    if not rejected.startswith(prompt):
        raise ValueError("`chosen` and `rejected` differ before the last assistant turn")
    return prompt, chosen[len(prompt) :].strip(), rejected[len(prompt) :].strip()


@dataclass(frozen=True)
class Unparsed:
    """A line that is not JSON: its text (kept in the quarantine) and the parser's complaint."""

    text: str
    error: str


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        yield from fh


def _records(path: Path, fmt: str) -> Iterator[tuple[int, Any]]:
    """(row number, record or `Unparsed`) for each row of the file; PreferenceImportError, naming the
    file and the fix, when the file cannot be read as `fmt` at all."""
    if fmt == "parquet":
        try:
            # the rows read whole here: pyarrow decodes a string column's bytes only now (a damaged one raises
            # UnicodeDecodeError)
            rows = pd.read_parquet(path).to_dict(orient="records")
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise PreferenceImportError(
                f"{path} is not a readable Parquet file ({type(exc).__name__}: "
                f"{(str(exc).strip().splitlines() or [''])[0]}); export it again, "
                "or pass --format jsonl / hh-rlhf for JSON lines"
            ) from exc
        yield from enumerate(rows)
        return
    try:
        for i, line in enumerate(_lines(path)):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                yield i, Unparsed(line.rstrip("\n"), str(exc))
    except UnicodeDecodeError as exc:
        raise PreferenceImportError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at offset "
            f"{exc.start}); save it as UTF-8 "
            "JSON lines, or pass --format parquet for a Parquet file"
        ) from exc
    except (OSError, EOFError, zlib.error) as exc:  # a damaged or truncated .gz among them
        raise PreferenceImportError(
            f"cannot read {path} as {'gzipped ' if path.suffix == '.gz' else ''}JSON lines ({exc}); check the file, "
            "or pass --format parquet for a Parquet file"
        ) from exc


def parse_preference_file(path: Path, fmt: str, source_name: str) -> ParsedFile:
    if fmt not in FORMATS:
        raise PreferenceImportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    pairs, bad = [], []
    for row_no, record in _records(path, fmt):
        try:
            if isinstance(record, Unparsed):
                raise ValueError(f"not JSON: {record.error}")
            if not isinstance(record, dict):
                raise ValueError(f"expected an object, got {type(record).__name__}")
            if fmt == "hh-rlhf":
                prompt, chosen, rejected = split_hh_rlhf(record.get("chosen"), record.get("rejected"))
            else:
                missing = [k for k in ("prompt", "chosen", "rejected") if not isinstance(record.get(k), str)]
                if missing:
                    raise ValueError(f"missing or non-text fields {missing}")
                prompt, chosen, rejected = record["prompt"], record["chosen"].strip(), record["rejected"].strip()
            if not prompt.strip():
                raise ValueError("empty prompt")
            if not chosen or not rejected:
                raise ValueError("empty chosen or rejected reply")
            if chosen == rejected:
                raise ValueError("chosen and rejected replies are identical")
            tag = record.get("tag")
            if isinstance(tag, float) and tag != tag:  # a Parquet row without one
                tag = None
            if tag is not None and (not isinstance(tag, str) or not tag.strip()):
                raise ValueError(f"`tag` must be a non-empty text (a dimension, or a quality like truth), got {tag!r}")
        except ValueError as exc:
            raw = record.text if isinstance(record, Unparsed) else json.dumps(record, default=str, ensure_ascii=False)
            bad.append({"source_file": source_name, "source_row": row_no, "reason": str(exc), "raw": raw[:2000]})
            continue
        pairs.append(
            {
                "pair_id": fingerprint([prompt, chosen, rejected], 12),
                "prompt_id": fingerprint(prompt, 12),
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "tag": tag.strip() if tag else None,
                "source": f"human:{fmt}",
                "source_file": source_name,
                "source_row": row_no,
            }
        )
    return ParsedFile(pd.DataFrame(pairs, columns=HUMAN_PAIR_COLUMNS), pd.DataFrame(bad, columns=QUARANTINE_COLUMNS))


def inbox_dir(data_dir: Path, partition: str) -> Path:
    return data_dir / "inbox" / "human_preferences" / partition


def check_importable(path: Path, fmt: str) -> ParsedFile:
    """The file parsed as `fmt`, or PreferenceImportError naming it and the fix when it cannot be read,
    holds no rows, or holds no usable pair (the first reasons given): checked before anything is
    copied, so a file that cannot be imported never reaches the inbox."""
    if not path.is_file():
        raise PreferenceImportError(f"{path} does not exist or is not a file")
    parsed = parse_preference_file(path, fmt, path.name)
    if parsed.pairs.empty:
        if parsed.quarantine.empty:
            raise PreferenceImportError(
                f"{path} holds no rows; a {fmt} file needs "
                + (
                    "one JSON object per line with `chosen` and `rejected` transcripts"
                    if fmt == "hh-rlhf"
                    else "rows with `prompt`, `chosen` and `rejected`"
                )
            )
        reasons = parsed.quarantine["reason"].value_counts()
        raise PreferenceImportError(
            f"{path} holds no usable pair: "
            + "; ".join(f"{n} row(s): {r}" for r, n in reasons.head(3).items())
            + f"; first row {int(parsed.quarantine['source_row'].iloc[0]) + 1}; fix the rows (or the "
            "--format) and import again"
        )
    return parsed


def add_to_inbox(path: Path, fmt: str, data_dir: Path, partition: str) -> tuple[Path, bool]:
    """Copy `path` into the partition's inbox under its content hash, once `check_importable` passed;
    (inbox file, newly added)."""
    if fmt not in FORMATS:
        raise PreferenceImportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    check_importable(path, fmt)
    digest = file_sha256(path)
    inbox = inbox_dir(data_dir, partition)
    inbox.mkdir(parents=True, exist_ok=True)
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    target = inbox / f"{digest[:16]}{suffix}"
    sidecar = target.with_name(target.name + ".import.json")
    if target.is_file() and sidecar.is_file():
        return target, False
    shutil.copyfile(path, target)
    sidecar.write_text(json.dumps({"format": fmt, "original": str(path.resolve()), "sha256": digest}, indent=2) + "\n")
    return target, True


def inbox_files(data_dir: Path, partition: str) -> list[tuple[Path, str, str]]:
    """(file, format, sha256) of every imported file of the partition, in name order."""
    inbox = inbox_dir(data_dir, partition)
    out = []
    for sidecar in sorted(inbox.glob("*.import.json")) if inbox.is_dir() else []:
        meta = json.loads(sidecar.read_text())
        out.append((sidecar.with_name(sidecar.name.removesuffix(".import.json")), meta["format"], meta["sha256"]))
    return out
