"""Versions and lineage by expectation.

A stage's version is derived, never written by hand: a fingerprint of
- the values of the config paths it declared (its slice, `Stage.settings`),
- the content digest of each input version it reads (the bytes, not a name: two runs of a sampling
  teacher under the same settings give two different label sets, and so two different reward models),
- a digest of the source of every module its build function runs (its module and, transitively, every
  `hominem_pipeline` module those import),
- the digests of the files outside the config it reads (`Stage.files`: seed prompts, memory files, ...).

A stage finds its inputs by the same rule: the input version its own config implies (`Lineage.expected`),
never "whatever was written last". Two overlays against one data folder therefore never read each
other's days, and a missing input is named with the command that builds it.
"""

from __future__ import annotations

import ast
import datetime as dt
import functools
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hominem_pipeline
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import (
    ArtifactNotFound,
    ArtifactRef,
    ArtifactStore,
    fingerprint,
)
from hominem_pipeline.core.pipeline.stage import Stage, window_days

PACKAGE = "hominem_pipeline"
PACKAGE_ROOT = Path(hominem_pipeline.__file__).resolve().parent  # the hominem_pipeline/ folder


def _module_file(module: str, root: Path) -> Path | None:
    parts = module.split(".")[1:]
    if not parts:
        return root / "__init__.py"
    rel = Path(*parts)
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=4096)
def _imports(source: str, module: str) -> frozenset[str]:
    """Every `hominem_pipeline` module a source imports, at any depth of the file (function-level too); kept by the
    source's text, so a copy of the package a test edits parses only what changed."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = (
                node.module
                if node.level == 0
                else importlib.util.resolve_name("." * node.level + node.module, module.rpartition(".")[0])
            )
            if base.split(".")[0] == PACKAGE:
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return frozenset(found)


def module_closure(module: str, root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """`module` and every `hominem_pipeline` module it imports, transitively, with their packages'
    `__init__.py`: name -> file."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name, root)
        if path is None:  # `from pkg import name` where name is not a module
            continue
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
        todo.extend(_imports(path.read_text(), name if path.name != "__init__.py" else name + ".__init__"))
    return seen


def code_digest(module: str, root: Path = PACKAGE_ROOT) -> str:
    """The digest of the source of `module` and every module it runs. The installed package's sources
    do not change while a process runs, so its digests are computed once; another `root` (a copy a test
    edits) is read every time."""
    return _installed_digest(module) if root == PACKAGE_ROOT else _digest(module, root)


@functools.lru_cache(maxsize=None)
def _installed_digest(module: str) -> str:
    return _digest(module, PACKAGE_ROOT)


def _digest(module: str, root: Path) -> str:
    h = hashlib.sha256()
    for name, path in sorted(module_closure(module, root).items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def settings_values(stage: Stage, cfg: HominemConfig) -> dict[str, Any]:
    return cfg.section(*stage.settings(cfg))


def stage_seed(cfg: HominemConfig, stage: str, partition: str) -> int:
    return int(fingerprint([cfg.project.seed, stage, partition], 8), 16) % (2**31 - 1)


def definition_version(stage: Stage, cfg: HominemConfig, root: Path = PACKAGE_ROOT) -> str:
    """What the stage's code and settings make of any inputs: Dagster's `code_version` of the asset."""
    return fingerprint({"settings": settings_values(stage, cfg), "code": code_digest(stage.build.__module__, root)})


def stage_version(
    stage: Stage, cfg: HominemConfig, partition: str, inputs: dict[str, list[ArtifactRef]], root: Path = PACKAGE_ROOT
) -> str:
    return fingerprint(
        {
            "stage": stage.name,
            "partition": partition,
            "definition": definition_version(stage, cfg, root),
            "inputs": {a: [[r.partition, r.content] for r in refs] for a, refs in sorted(inputs.items())},
            "files": stage.files(cfg, partition) if stage.files else None,
        }
    )


@dataclass(frozen=True)
class Plan:
    """What a stage is to read and the version it would build from it."""

    stage: Stage
    partition: str
    inputs: dict[str, list[ArtifactRef]]
    version: str
    built: ArtifactRef | None  # that version, when it is already there
    # earlier days of a window that are built, but not as this config builds them now, and so not read: (asset, day,
    # version expected)
    left_out: tuple[tuple[str, str, str], ...] = ()


class MissingInput(ArtifactNotFound):
    """An input the stage's config implies has not been built."""


class Lineage:
    """Expected versions under one config, resolved against one data folder (memoized per instance:
    make a new one after building something)."""

    def __init__(
        self,
        cfg: HominemConfig,
        stages: dict[str, Stage],
        store: ArtifactStore | None = None,
        root: Path = PACKAGE_ROOT,
    ):
        self.cfg, self.stages, self.root = cfg, stages, root
        self.store = store or ArtifactStore(cfg.data_dir)
        self._memo: dict[tuple[str, str], Plan | MissingInput] = {}
        self._here: dict[tuple[str, str, str], bool] = {}

    def plan(self, asset: str, partition: str) -> Plan:
        """The inputs `asset` reads for `partition` under this config and the version it would build;
        raises MissingInput naming the first input that is not built, with the command to build it."""
        key = (asset, partition)
        if key not in self._memo:
            try:
                self._memo[key] = self._plan(asset, partition)
            except MissingInput as exc:
                self._memo[key] = exc
        found = self._memo[key]
        if isinstance(found, MissingInput):
            raise found
        return found

    def expected(self, asset: str, partition: str) -> ArtifactRef | None:
        """The version of `asset` for `partition` this config implies, if it is built; else None."""
        try:
            return self.plan(asset, partition).built
        except MissingInput:
            return None

    def require(self, asset: str, partition: str) -> ArtifactRef:
        """The expected version, or an error naming it and how to build it."""
        plan = self.plan(asset, partition)
        if plan.built is None:
            raise MissingInput(
                f"{asset} for {partition} is not built under this config (version {plan.version}); "
                f"build it: {build_command(asset, partition, self.cfg)}"
            )
        return plan.built

    def latest(self, asset: str) -> ArtifactRef | None:
        """The expected version of `asset` on the newest day that has it built, or None."""
        for day in reversed(self.store.partitions(asset)):
            if (ref := self.expected(asset, day)) is not None:
                return ref
        return None

    def newest(self, asset: str, partition: str | None = None) -> tuple[ArtifactRef | None, str | None]:
        """What a command that reads `asset` should use: the version this config implies on `partition`
        (default: the newest day that has one), else the newest one this config's code and settings built
        there from the day's earlier inputs (people gave feedback since, the labels were rebuilt, ...),
        with a note naming what changed; (None, why) when neither is built."""
        days = [partition] if partition else list(reversed(self.store.partitions(asset)))
        for day in days:
            if (ref := self.expected(asset, day)) is not None:
                return ref, None
        for day in days:
            for ref in reversed(self.store.versions(asset, day)):
                if ref.manifest.get("complete", True) and self._built_here(ref):
                    return ref, self.stale_note(ref)
        return None, self.why_not_built(asset, partition)

    def stale_note(self, ref: ArtifactRef) -> str:
        """One line for a version older than its inputs: what changed at the root, and the command that
        brings it up to date (`stale_details` says the whole chain)."""
        roots = [r for r in self.waits_on(ref.asset, ref.partition) if r != (ref.asset, ref.partition)]
        changed = ", ".join(self._root_words(a, d) for a, d in roots) if roots else self.changes(ref)
        return (
            f"{ref.asset} {ref.partition} is from before {changed}; "
            f"`{build_command(ref.asset, ref.partition, self.cfg)}` "
            f"brings it up to date"
        )

    def stale_details(self, ref: ArtifactRef) -> str:
        """The whole reason a version is older than its inputs: its version and every step of the chain."""
        return f"{ref.asset} for {ref.partition} is version {ref.version}, built before {self.changes(ref)}"

    def waits_on(self, asset: str, partition: str) -> list[tuple[str, str]]:
        """The most upstream (asset, day)s that `asset` for `partition` waits on: not built as this config
        expects them, while everything they read is (a day's log that grew: its human_feedback). [] when it
        is built; [(asset, partition)] when it alone is out of date."""
        if self.expected(asset, partition) is not None:
            return []
        found: list[tuple[str, str]] = []
        for inp in self.stages[asset].inputs:
            for day in window_days(partition, inp.window(self.cfg)) if inp.window else [partition]:
                if day == partition and not inp.optional or self.store.versions(inp.asset, day):
                    found += [r for r in self.waits_on(inp.asset, day) if r not in found]
        return found or [(asset, partition)]

    def _root_words(self, asset: str, day: str) -> str:
        """What is new at a root of a stale chain, in a person's words."""
        if asset != "human_feedback":
            return f"a new {asset} {day}" if self.store.versions(asset, day) else f"{asset} {day}, not built yet"
        from hominem_pipeline.core.builds.human_feedback import log_file
        from hominem_pipeline.core.online.log import read_events

        path = log_file(self.cfg, day)
        now = sum(1 for _ in read_events(path)) if path.is_file() else 0
        built = [r for r in self.store.versions(asset, day) if self._built_here(r)]
        then = (built[-1].manifest.get("metadata") or {}).get("events") if built else {}  # its count by kind
        then = sum(then.values()) if isinstance(then, dict) else then
        return (
            f"new feedback ({now - then} event(s))"
            if isinstance(then, int) and now > then
            else "new feedback in the service's log"
        )

    def changes(self, ref: ArtifactRef) -> str:
        """What is new among the inputs `ref` was built from, in words (its inputs as this config plans them now)."""
        try:
            now = self.plan(ref.asset, ref.partition).inputs
        except MissingInput as exc:
            return f"an input was replaced ({exc})"
        then = {
            a: {(i["partition"], i["version"]) for i in refs} for a, refs in ref.manifest.get("inputs", {}).items()
        }
        changed = sorted(
            a for a in set(now) | set(then) if {(r.partition, r.version) for r in now.get(a, [])} != then.get(a, set())
        )
        if not changed:
            return "its inputs' files changed"
        words = {"human_feedback": "new feedback in the service's log"}
        return ", ".join(words.get(a, f"a new {a}") for a in changed)

    def why_not_built(self, asset: str, partition: str | None) -> str:
        """Why this config finds no `asset` (on `partition`, or on any day), and what builds it."""
        built = (
            self.store.partitions(asset)
            if partition is None
            else [partition]
            if self.store.versions(asset, partition)
            else []
        )
        if not built:
            if partition:
                return (
                    f"no {asset} for {partition} is built in {self.cfg.data_dir}; build it: "
                    f"{build_command(asset, partition, self.cfg)}"
                )
            return f"no {asset} is built in {self.cfg.data_dir}; run `hominem run` (or `make run`) first"
        day = built[-1]
        try:
            plan = self.plan(asset, day)
        except MissingInput as exc:
            return f"no {asset} for {day} can be read under this config: {exc}"
        return (
            f"{asset} for {day} is built only under other settings or code than this config's (version "
            f"{plan.version} is expected); "
            f"build it: {build_command(asset, day, self.cfg)}"
        )

    def _built_here(self, ref: ArtifactRef) -> bool:
        """`ref` was built by this config's code and settings, and so was every input it read, all the way
        up (from whatever those inputs held then)."""
        key = (ref.asset, ref.partition, ref.version)
        if key not in self._here:
            stage = self.stages.get(ref.asset)
            ok = stage is not None and ref.manifest.get("definition") == definition_version(stage, self.cfg, self.root)
            for refs in ref.manifest.get("inputs", {}).values() if ok else ():
                for i in refs:
                    found = self.store.existing(i["asset"], i["partition"], i["version"])
                    if found is None or not self._built_here(found):
                        ok = False
            self._here[key] = ok
        return self._here[key]

    def _plan(self, asset: str, partition: str) -> Plan:
        stage = self.stages[asset]
        inputs: dict[str, list[ArtifactRef]] = {}
        left_out: list[tuple[str, str, str]] = []
        for inp in stage.inputs:
            days = window_days(partition, inp.window(self.cfg)) if inp.window else [partition]
            refs = []
            for day in days:
                ref = self.expected(inp.asset, day)
                if ref is None and (day != partition or inp.optional) and self.store.versions(inp.asset, day):
                    try:
                        left_out.append((inp.asset, day, self.plan(inp.asset, day).version))
                    except MissingInput as exc:
                        left_out.append((inp.asset, day, f"not buildable yet: {exc}"))
                if ref is None and day == partition and not inp.optional:
                    try:
                        version = self.plan(inp.asset, day).version
                    except MissingInput as exc:
                        raise MissingInput(
                            f"{asset} for {partition} needs {inp.asset} for {day}, which cannot be built yet: {exc}"
                        ) from None
                    raise MissingInput(
                        f"{asset} for {partition} needs {inp.asset} for {day} as this config builds it "
                        f"(version {version}), which is not built; "
                        f"build it: {build_command(inp.asset, day, self.cfg)}"
                    )
                if ref is not None:
                    refs.append(ref)
            inputs[inp.asset] = refs
        version = stage_version(stage, self.cfg, partition, inputs, self.root)
        return Plan(stage, partition, inputs, version, self.store.find(asset, partition, version), tuple(left_out))


def window_gaps(data: Lineage, day: str, label_days: int, pair_days: int) -> list[tuple[str, str]]:
    """The earlier days `day`'s windows read that this config has not built, oldest first, each with
    what it needs (days before project.partitions_start are left out): `preference_pairs` for the
    days of the adapter's window (`pair_days`; their run builds the day's labels and reward model too),
    else `teacher_labels` for the days of the reward model's window (`label_days`), else `human_feedback`
    for a day of either window whose log changed since its feedback was built (or that never was)."""
    end = dt.date.fromisoformat(day)
    feedback = data.stages["human_feedback"]
    gaps = []
    for ago in range(max(label_days, pair_days) - 1, 0, -1):
        d = end - dt.timedelta(days=ago)
        if data.cfg.project.before_start(d.isoformat()):
            continue
        asset = "preference_pairs" if ago < pair_days else "teacher_labels" if ago < label_days else None
        if asset and data.expected(asset, d.isoformat()) is None:
            gaps.append((d.isoformat(), asset))
        elif (
            asset
            and feedback.files(data.cfg, d.isoformat()) is not None
            and data.expected("human_feedback", d.isoformat()) is None
        ):
            gaps.append((d.isoformat(), "human_feedback"))
    return gaps


def lineage(cfg: HominemConfig, store: ArtifactStore | None = None) -> Lineage:
    """Expected versions under `cfg`, for the pipeline's stage table."""
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    return Lineage(cfg, STAGES_BY_NAME, store)


def build_command(asset: str, partition: str, cfg: HominemConfig) -> str:
    overlay = f" --config {cfg.overlay}" if cfg.overlay else ""
    return f"hominem run --date {partition} --select '*{asset}'{overlay}"
