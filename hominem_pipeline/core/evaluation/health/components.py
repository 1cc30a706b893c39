"""The Reward Health Index's parts: the five components' names, one measured component, the whole report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

COMPONENTS = ("dcs", "gvs", "mss", "cdrs", "lrps")


@dataclass(frozen=True)
class Component:
    name: str
    value: float | None  # None = missing
    how: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthReport:
    rhi: float | None
    partial: bool
    missing: list[str]
    components: dict[str, Component]
    deployable: bool
    reason: str
    win_rate: float | None = None  # the adapter's win rate over the base on the evaluation prompts
    win_check: dict[str, Any] | None = None  # that win rate's paired check (noise.PairedCheck.as_dict)
    threshold: float | None = None  # the RHI it was held to, and where that comes from
    threshold_name: str | None = None
    verdicts: dict[str, str | None] = field(
        default_factory=dict
    )  # component -> where it lies against the panel's healthy range (None: no range)
    below_range: list[str] = field(default_factory=list)  # the components below the panel's healthy range
    calibration: str | None = None  # the calibration file in force (None: the config's constants) and its digest
    calibration_digest: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "components": {k: asdict(v) for k, v in self.components.items()}}


def clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))
