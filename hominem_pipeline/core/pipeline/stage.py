"""What a stage's build function sees and returns, and how a stage is declared.

A `Stage` is one row of the stage table (`core/pipeline/stages.py`): its inputs with the window of days each
reads, the config paths it may read, and its build function. The build function gets a
`StageContext` whose `cfg` is a `ConfigSlice`: the settings the stage declared, and nothing else. A read
outside the slice raises `SliceError`, so what a stage reads is exactly what its version is made of.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import ArtifactRef

if TYPE_CHECKING:
    from hominem_pipeline.core.pipeline.tracking import StageRun

# Members of the config that name places, not settings: any stage may read them.
LOCATIONS = frozenset({"root", "overlay", "path", "data_dir", "mlflow_uri"})


def window_days(partition: str, days: int) -> list[str]:
    """The `days` days up to and including `partition`, oldest first: the days an input's window reads."""
    end = dt.date.fromisoformat(partition)
    return [(end - dt.timedelta(days=offset)).isoformat() for offset in range(days - 1, -1, -1)]


class SliceError(LookupError):
    """A stage read a setting outside the config slice it declared. Not an AttributeError, so that
    `getattr(cfg, name, default)` or `hasattr` cannot turn an undeclared read into a silent default."""


def _covered(path: str, paths: frozenset[str]) -> bool:
    """`path` is one of `paths` or lies inside one of them."""
    return any(path == p or path.startswith(p + ".") for p in paths)


def _opens(path: str, paths: frozenset[str]) -> bool:
    """Some of `paths` lie inside `path`."""
    return any(p.startswith(path + ".") for p in paths)


class _View:
    """A read-only view of a config section that lets through only the declared paths."""

    def __init__(self, stage: str, obj: Any, prefix: str, allowed: frozenset[str]):
        self._stage, self._obj, self._prefix, self._allowed = stage, obj, prefix, allowed

    def _full(self, obj: Any, prefix: str) -> bool:
        """Every field under `prefix` is allowed (then methods of the section may run on the real object)."""
        if prefix and _covered(prefix, self._allowed):
            return True
        if not isinstance(obj, BaseModel):
            return False
        return all(self._full(getattr(obj, f), f"{prefix}.{f}" if prefix else f) for f in type(obj).model_fields)

    def _child(self, name: str) -> Any:
        path = f"{self._prefix}.{name}" if self._prefix else name
        value = getattr(self._obj, name)
        fields = type(self._obj).model_fields if isinstance(self._obj, BaseModel) else {}
        if name not in fields:  # a method or property of the section: it may read any of its fields
            if self._full(self._obj, self._prefix):
                return value
        elif _covered(path, self._allowed) or self._full(value, path):
            return value
        elif _opens(path, self._allowed):
            return _View(self._stage, value, path, self._allowed)
        raise SliceError(
            f"stage {self._stage!r} read the setting {path!r}, which is not in its config slice; "
            "add it to the stage's `reads` in hominem_pipeline/core/pipeline/stages.py (then it is part "
            "of the stage's version)"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._child(name)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """The allowed part of this section as plain data."""
        dumped = self._obj.model_dump(**kwargs)
        out = {}
        for name in type(self._obj).model_fields:
            path = f"{self._prefix}.{name}" if self._prefix else name
            if _covered(path, self._allowed):
                out[name] = dumped[name]
            elif _opens(path, self._allowed):
                out[name] = _View(self._stage, getattr(self._obj, name), path, self._allowed).model_dump(**kwargs)
        return out

    def __repr__(self) -> str:
        return f"<config slice of {self._stage!r} at {self._prefix or 'root'}>"


class ConfigSlice(_View):
    """The config as one stage sees it: the declared paths (versioned and runtime) and the project's locations."""

    def __init__(self, cfg: HominemConfig, stage: str, paths: frozenset[str]):
        super().__init__(
            stage, cfg, "", frozenset(paths) | {"project.seed", "runtime.device"}
        )  # runtime.device: every stage, never versioned
        self.full = cfg  # for the runner and the tracker; build functions read through the slice

    def __getattr__(self, name: str) -> Any:
        if name in LOCATIONS:
            return getattr(self._obj, name)
        if name == "dimension_names":
            return [d.name for d in self._child("dimensions")]
        return super().__getattr__(name)


@dataclass
class StageOutput:
    metrics: dict[str, float | None]
    metadata: dict[str, Any]
    table: str | None = None  # the file downstream stages log as their MLflow input dataset
    mlflow_artifacts: list[str] = field(default_factory=list)  # files (relative) copied to MLflow
    quarantine: pd.DataFrame | None = None  # rejected rows with a `reason` column (kept out of the table)
    # False when some of the work failed for good (API calls out of retries): see ArtifactStore.publish.
    complete: bool = True


@dataclass
class StageContext:
    cfg: HominemConfig  # a ConfigSlice at run time: only the stage's declared settings
    partition: str
    inputs: dict[str, list[ArtifactRef]]
    out_dir: Path
    run: StageRun
    seed: int

    def one(self, asset: str) -> ArtifactRef:
        refs = self.inputs[asset]
        if len(refs) != 1:
            raise ValueError(f"expected one {asset} input for {self.partition}, got {len(refs)}")
        return refs[0]

    def tables(self, asset: str) -> pd.DataFrame:
        """The input tables of `asset` over its window, concatenated with a `partition` column."""
        frames = []
        for ref in self.inputs[asset]:
            table = ref.manifest.get("table")
            if not table:
                raise ValueError(f"{asset} has no table to read")
            frames.append(pd.read_parquet(ref.file(table)).assign(partition=ref.partition))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass(frozen=True)
class Input:
    """An upstream asset a stage reads: the same day, or a window of days ending on it."""

    asset: str
    window: Callable[[HominemConfig], int] | None = (
        None  # days up to and including the stage's own; None: that day only
    )
    optional: bool = False  # no day of the window (not even the stage's own) need be built


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Check:
    """A check on a stage's result, shown by Dagster as an asset check; `blocking` stops the run. A failure
    is an ERROR when the check is blocking or `error` (what it guards is refused downstream, e.g. by the
    live gate, while the run goes on to measure the rest), else a WARN."""

    name: str
    description: str
    evaluate: Callable[[dict[str, Any], HominemConfig, Path], CheckOutcome]  # (the version's metrics, config, folder)
    blocking: bool = False
    error: bool = False

    @property
    def severity(self) -> str:
        return "error" if self.blocking or self.error else "warn"


@dataclass(frozen=True)
class Registered:
    """A stage whose versions are models in the MLflow registry (alias `current` = the newest built)."""

    name: str  # the registered model's name
    log: Callable[[Path], str]  # logs a version folder as an MLflow model in the active run; returns its URI


Reads = tuple[str, ...] | Callable[[HominemConfig], tuple[str, ...]]


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    group: str  # Dagster asset group: data, training, evaluation
    kinds: frozenset[str]
    inputs: tuple[Input, ...]
    reads: Reads  # config paths the output depends on (part of its version)
    build: Callable[[StageContext], StageOutput]
    runtime: tuple[str, ...] = ()  # config paths read that change how fast, never what is built (not versioned)
    files: Callable[[HominemConfig, str], Any] | None = (
        None  # files outside the config it reads (their digests), by config and day
    )
    daily: bool = True  # part of the daily job (False: imported data, materialized on its own)
    # a day of it that a window reads and that is stale (its files changed since it was built: the service's log grew)
    # is rebuilt
    # by the reading stage's run before it reads (`core/pipeline/runner.py`); only for a cheap stage without inputs of
    # its own
    refresh: bool = False
    checks: tuple[Check, ...] = ()
    registered: Registered | None = None
    # the day's gate does not read it: a run builds it after the gate's decision (Dagster step priority), so the
    # day's adapter goes live as soon as it can
    after_gate: bool = False

    def settings(self, cfg: HominemConfig) -> tuple[str, ...]:
        """The versioned config paths for this config (a stage may read more settings in some modes)."""
        return tuple(sorted(set(self.reads(cfg) if callable(self.reads) else self.reads) | {"project.seed"}))

    def slice(self, cfg: HominemConfig) -> ConfigSlice:
        return ConfigSlice(cfg, self.name, frozenset(self.settings(cfg)) | frozenset(self.runtime))
