"""Immutable, versioned artifacts on disk.

Layout: `<data_dir>/<asset>/<partition>/<version>/` holds one immutable version (its files plus
`manifest.json`); `<data_dir>/<asset>/<partition>/current.json` points at the version the last
materialization produced. A version id is a fingerprint of the stage's code version, its settings and
the exact versions of its inputs, so an unchanged stage finds its output already there and a changed
one writes beside the old version instead of over it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
CURRENT = "current.json"


class ArtifactNotFound(LookupError):
    """An upstream artifact a stage needs has not been materialized."""


def fingerprint(payload: Any, length: int = 16) -> str:
    """A stable short hash of JSON-serialisable data."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path: Path, payload: Any) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class ArtifactRef:
    """One published version of one partition of one asset."""

    asset: str
    partition: str
    version: str
    path: Path

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.path / MANIFEST).read_text())

    def file(self, name: str) -> Path:
        p = self.path / name
        if not p.exists():
            raise ArtifactNotFound(f"{self.asset}/{self.partition} version {self.version} has no file {name!r}")
        return p

    @property
    def key(self) -> dict[str, str]:
        return {"asset": self.asset, "partition": self.partition, "version": self.version}


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def partition_dir(self, asset: str, partition: str) -> Path:
        return self.root / asset / partition

    def existing(self, asset: str, partition: str, version: str) -> ArtifactRef | None:
        path = self.partition_dir(asset, partition) / version
        if (path / MANIFEST).is_file():
            return ArtifactRef(asset, partition, version, path)
        return None

    def current(self, asset: str, partition: str) -> ArtifactRef | None:
        pointer = self.partition_dir(asset, partition) / CURRENT
        if not pointer.is_file():
            return None
        version = json.loads(pointer.read_text())["version"]
        ref = self.existing(asset, partition, version)
        if ref is None:
            raise ArtifactNotFound(
                f"{pointer} points at version {version}, which is missing; "
                f"re-materialize {asset} for {partition}"
            )
        return ref

    def require(self, asset: str, partition: str) -> ArtifactRef:
        ref = self.current(asset, partition)
        if ref is None:
            raise ArtifactNotFound(
                f"no {asset} for partition {partition} under {self.root}; "
                f"materialize it first: hominem run --date {partition} --select '{asset}'"
            )
        return ref

    def window(self, asset: str, end_partition: str, days: int, require_end: bool = True) -> list[ArtifactRef]:
        """The materialized partitions of `asset` in the `days` days ending at `end_partition`, oldest first.

        Days in the window that were never materialized are skipped; the end day itself is required
        unless `require_end` is False.
        """
        end = dt.date.fromisoformat(end_partition)
        refs = []
        for offset in range(days - 1, -1, -1):
            key = (end - dt.timedelta(days=offset)).isoformat()
            ref = self.require(asset, key) if offset == 0 and require_end else self.current(asset, key)
            if ref is not None:
                refs.append(ref)
        return refs

    def quarantine_path(self, asset: str, partition: str, version: str) -> Path:
        """Rows a version rejected, with the reason: `<data_dir>/quarantine/<asset>/<date>/<version>.parquet`."""
        return self.root / "quarantine" / asset / partition / f"{version}.parquet"

    def write_quarantine(self, ref: ArtifactRef, rows: Any) -> Path:
        """Write a version's rejected rows (a DataFrame, possibly empty) atomically beside the store."""
        path = self.quarantine_path(ref.asset, ref.partition, ref.version)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        rows.to_parquet(tmp, index=False)
        os.replace(tmp, path)
        return path

    def partitions(self, asset: str) -> list[str]:
        """Partitions of `asset` that have a current version, in date order."""
        base = self.root / asset
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / CURRENT).is_file())

    @contextlib.contextmanager
    def staging(self, asset: str, partition: str) -> Iterator[Path]:
        """A private scratch folder beside the partition's versions, removed on exit."""
        parent = self.partition_dir(asset, partition)
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".staging-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish(self, staged: Path, asset: str, partition: str, version: str, manifest: dict[str, Any], *, complete: bool = True) -> ArtifactRef:
        """Seal a staged folder as `version` (with file digests in its manifest) and return its ref.

        An incomplete build (some of its work failed for good) is sealed as `<version>-partial-<digest
        of its files>` instead: `existing(version)` does not find it, so the next run builds again, and
        downstream stages see a new input version once the gaps are filled.

        If another process published the same version first, its copy wins and this one is dropped:
        both were built from the same inputs and settings.
        """
        files = {
            str(p.relative_to(staged)): file_sha256(p)
            for p in sorted(staged.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        if not complete:
            version = f"{version}-partial-{fingerprint(files, 8)}"
        full = {
            **manifest,
            "asset": asset,
            "partition": partition,
            "version": version,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "files": files,
        }
        (staged / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True, default=str) + "\n")
        target = self.partition_dir(asset, partition) / version
        try:
            os.rename(staged, target)
        except OSError:
            if not (target / MANIFEST).is_file():
                raise
        return ArtifactRef(asset, partition, version, target)

    def point_current(self, ref: ArtifactRef, **extra: Any) -> None:
        _write_json_atomic(
            self.partition_dir(ref.asset, ref.partition) / CURRENT,
            {"version": ref.version, "updated_at": dt.datetime.now(dt.timezone.utc).isoformat(), **extra},
        )
