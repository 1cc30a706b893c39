"""Immutable, versioned artifacts on disk.

Layout: `<data_dir>/<asset>/<partition>/<version>/` holds one immutable version: its files plus
`manifest.json` (settings, inputs, metrics, each file's sha256 and their joint `content` digest). A
version id is derived from the stage's code, its settings and its inputs' contents
(`core/pipeline/lineage.py`), so an unchanged stage finds its output already there and a changed one writes
beside the old version instead of over it. Which version a stage reads is what its own config implies,
never a pointer to the last one written.
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

from hominem_pipeline.core.common.files import atomic_path, write_text_atomic

MANIFEST = "manifest.json"
PARTIAL = "-partial-"  # in the id of a version some of whose work failed for good


class ArtifactNotFound(LookupError):
    """An upstream artifact a stage needs has not been materialized."""


class DamagedArtifact(RuntimeError):
    """A published file no longer matches the sha256 its manifest recorded (or is gone)."""


def fingerprint(payload: Any, length: int = 16) -> str:
    """A stable short hash of JSON-serialisable data."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def data_label(data_dir: Path, path: Path) -> str:
    """How the log and the prediction log name a version folder: its path relative to the data folder
    (the path itself when it lies elsewhere)."""
    try:
        return str(path.resolve().relative_to(data_dir.resolve()))
    except ValueError:
        return str(path)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def optional_file_digest(path: Path | None) -> str | None:
    """`file_sha256` of a file a setting names: None when the setting is off, "missing" when the file
    is not there (the stage that reads it then says so)."""
    if path is None:
        return None
    return file_sha256(path) if path.is_file() else "missing"


# beside a folder's files: each file's size, mtime and sha256, so an unchanged file is not read again
DIGEST_CACHE = ".hominem-digest.json"


def folder_digest(folder: Path) -> str:
    """One sha256 over every file of `folder` (names and contents). A file whose size and modification
    time are unchanged since the last call reuses its recorded hash, so checking a large model folder
    again costs a directory listing."""
    folder = Path(folder)
    cache_path = folder / DIGEST_CACHE
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    entries, changed = {}, False
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name == DIGEST_CACHE:
            continue
        name, stat = str(p.relative_to(folder)), p.stat()
        known = cache.get(name)
        if known and known[0] == stat.st_size and known[1] == stat.st_mtime_ns:
            entries[name] = known
        else:
            entries[name], changed = [stat.st_size, stat.st_mtime_ns, file_sha256(p)], True
    if changed or set(cache) != set(entries):
        try:
            write_text_atomic(cache_path, json.dumps(entries, indent=2, sort_keys=True, default=str) + "\n")
        except OSError:  # a read-only folder is hashed again next time
            pass
    return fingerprint({name: e[2] for name, e in entries.items()}, 64)


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

    def damaged(self, names: list[str] | None = None) -> dict[str, str]:
        """{file: what is wrong} for the version's files (or `names` of them) that are missing or whose
        sha256 differs from the one the manifest recorded when the version was sealed; {} when whole.
        A manifest that cannot be read is reported as the file `manifest.json`."""
        try:
            files = self.manifest["files"]
        except (OSError, ValueError, KeyError) as exc:
            return {MANIFEST: f"unreadable ({exc.__class__.__name__})"}
        problems = {}
        for name in names if names is not None else sorted(files):
            path = self.path / name
            if name not in files:
                continue
            if not path.is_file():
                problems[name] = "missing"
            elif file_sha256(path) != files[name]:
                problems[name] = (
                    f"changed since it was written ({path.stat().st_size:,} bytes; sha256 differs from the manifest's)"
                )
        return problems

    def verified_file(self, name: str, rebuild: str) -> Path:
        """`file(name)`, once its bytes are checked against the manifest: DamagedArtifact naming the file,
        what is wrong and the fix (`rebuild`: the command that builds the version again) otherwise."""
        path = self.file(name)
        if problem := self.damaged([name]).get(name):
            raise DamagedArtifact(
                f"{path} is damaged: {problem}. Remove the version and build it again: rm -r {self.path} && {rebuild}"
            )
        return path

    @property
    def content(self) -> str:
        """The digest of the version's files (names and bytes): what downstream versions are derived from."""
        return self.manifest["content"]

    @property
    def complete(self) -> bool:
        return PARTIAL not in self.version

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

    def find(self, asset: str, partition: str, version: str) -> ArtifactRef | None:
        """`version` if it is built; else its newest partial build (some calls failed for good), if any."""
        if (ref := self.existing(asset, partition, version)) is not None:
            return ref
        partials = sorted(
            self.partition_dir(asset, partition).glob(f"{version}{PARTIAL}*/{MANIFEST}"),
            key=lambda p: p.stat().st_mtime,
        )
        return ArtifactRef(asset, partition, partials[-1].parent.name, partials[-1].parent) if partials else None

    def upstream(self, ref: ArtifactRef, asset: str) -> ArtifactRef | None:
        """The version of `asset` that `ref` was built from, following the manifests' inputs upward
        (breadth first, the first found), or None."""
        todo, seen = [ref], set()
        while todo:
            current = todo.pop(0)
            for inputs in current.manifest.get("inputs", {}).values():
                for i in inputs:
                    found = self.existing(i["asset"], i["partition"], i["version"])
                    if found is None or (found.asset, found.partition, found.version) in seen:
                        continue
                    if found.asset == asset:
                        return found
                    seen.add((found.asset, found.partition, found.version))
                    todo.append(found)
        return None

    def versions(self, asset: str, partition: str) -> list[ArtifactRef]:
        """Every built version of one partition, oldest first."""
        folder = self.partition_dir(asset, partition)
        found = sorted(folder.glob(f"*/{MANIFEST}"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
        return [
            ArtifactRef(asset, partition, m.parent.name, m.parent) for m in found if not m.parent.name.startswith(".")
        ]

    def quarantine_path(self, asset: str, partition: str, version: str) -> Path:
        """Rows a version rejected, with the reason: `<data_dir>/quarantine/<asset>/<date>/<version>.parquet`."""
        return self.root / "quarantine" / asset / partition / f"{version}.parquet"

    def write_quarantine(self, ref: ArtifactRef, rows: Any) -> Path:
        """Write a version's rejected rows (a DataFrame, possibly empty) atomically beside the store."""
        path = self.quarantine_path(ref.asset, ref.partition, ref.version)
        with atomic_path(path) as tmp:
            rows.to_parquet(tmp, index=False)
        return path

    def partitions(self, asset: str) -> list[str]:
        """Days with at least one built version of `asset`, in date order."""
        base = self.root / asset
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and any(p.glob(f"*/{MANIFEST}")))

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

    def publish(
        self,
        staged: Path,
        asset: str,
        partition: str,
        version: str,
        manifest: dict[str, Any],
        *,
        complete: bool = True,
    ) -> ArtifactRef:
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
        content = fingerprint(files)
        if not complete:
            version = f"{version}{PARTIAL}{content[:8]}"
        full = {
            **manifest,
            "asset": asset,
            "partition": partition,
            "version": version,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "files": files,
            "content": content,
        }
        (staged / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True, default=str) + "\n")
        target = self.partition_dir(asset, partition) / version
        try:
            os.rename(staged, target)
        except OSError:
            if not (target / MANIFEST).is_file():
                raise
        return ArtifactRef(asset, partition, version, target)
