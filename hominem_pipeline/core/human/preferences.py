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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.artifacts import file_sha256, fingerprint

FORMATS = ("hh-rlhf", "jsonl", "parquet")
ASSISTANT = "\n\nAssistant:"
HUMAN_PAIR_COLUMNS = ["pair_id", "prompt_id", "prompt", "chosen", "rejected", "source", "source_file", "source_row"]
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


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        yield from fh


def _records(path: Path, fmt: str) -> Iterator[tuple[int, Any]]:
    """(row number, record or an exception) for each row of the file."""
    if fmt == "parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise PreferenceImportError(f"cannot read {path} as Parquet: {exc}") from exc
        for i, row in enumerate(frame.to_dict(orient="records")):
            yield i, row
        return
    try:
        for i, line in enumerate(_lines(path)):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                yield i, exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PreferenceImportError(f"cannot read {path} as {'gzipped ' if path.suffix == '.gz' else ''}JSON lines: {exc}") from exc


def parse_preference_file(path: Path, fmt: str, source_name: str) -> ParsedFile:
    if fmt not in FORMATS:
        raise PreferenceImportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    pairs, bad = [], []
    for row_no, record in _records(path, fmt):
        try:
            if isinstance(record, Exception):
                raise ValueError(f"not JSON: {record}")
            if not isinstance(record, dict):
                raise ValueError(f"expected an object, got {type(record).__name__}")
            if fmt == "hh-rlhf":
                prompt, chosen, rejected = split_hh_rlhf(record.get("chosen"), record.get("rejected"))
            else:
                missing = [k for k in ("prompt", "chosen", "rejected") if not isinstance(record.get(k), str)]
                if missing:
                    raise ValueError(f"missing or non-text fields {missing}")
                prompt, chosen, rejected = record["prompt"], record["chosen"].strip(), record["rejected"].strip()
            if not chosen or not rejected:
                raise ValueError("empty chosen or rejected reply")
            if chosen == rejected:
                raise ValueError("chosen and rejected replies are identical")
        except ValueError as exc:
            raw = record if not isinstance(record, Exception) else None
            bad.append({"source_file": source_name, "source_row": row_no, "reason": str(exc), "raw": json.dumps(raw, default=str)[:2000]})
            continue
        pairs.append(
            {
                "pair_id": fingerprint([prompt, chosen, rejected], 12),
                "prompt_id": fingerprint(prompt, 12),
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "source": f"human:{fmt}",
                "source_file": source_name,
                "source_row": row_no,
            }
        )
    return ParsedFile(pd.DataFrame(pairs, columns=HUMAN_PAIR_COLUMNS), pd.DataFrame(bad, columns=QUARANTINE_COLUMNS))


def inbox_dir(data_dir: Path, partition: str) -> Path:
    return data_dir / "inbox" / "human_preferences" / partition


def add_to_inbox(path: Path, fmt: str, data_dir: Path, partition: str) -> tuple[Path, bool]:
    """Copy `path` into the partition's inbox under its content hash; (inbox file, newly added)."""
    if not path.is_file():
        raise PreferenceImportError(f"{path} does not exist or is not a file")
    if fmt not in FORMATS:
        raise PreferenceImportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
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
