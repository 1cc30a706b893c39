"""Writing a file whole: a reader, or a process killed mid-write, sees the old file or the new one,
never a torn one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def staging_name(path: Path) -> Path:
    """The hidden temporary name beside `path` that a write goes to first (`.NAME.<random>.tmp`)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


@contextmanager
def atomic_path(path: Path, *, durable: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write to; when the block ends without an error it is renamed over
    `path`, and in any case nothing is left at the temporary name.

    Args:
        path: the file to replace (its folder is created).
        durable: also fsync the file before the rename and the folder after it, so that the new file
            survives a power loss once the block returns: for what a client was told is kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_name(path)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str, *, durable: bool = False, encoding: str = "utf-8") -> Path:
    """Replace `path` by `text` whole (`atomic_path`); returns `path`."""
    with atomic_path(path, durable=durable) as tmp:
        tmp.write_text(text, encoding=encoding)
    return path


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A new temporary folder beside `path` to fill; when the block ends without an error it is renamed
    to `path` (which must not exist then, or be empty), and in any case nothing is left at the
    temporary name: the folder appears whole or not at all."""
    import shutil

    tmp = staging_name(path)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
