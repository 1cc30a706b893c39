"""The Reward Health Index's calibration: what the panel of known days taught it.

`benchmarks/health_panel.py calibrate` measures every component on days whose answer is known
(healthy ones, and ones broken in known ways) and writes `health.calibration`
(config/health/calibration.yaml): the normalising constants taken from the healthy days, the weights,
the threshold chosen on the panel, and each component's range over the healthy and the broken days.
The RHI stage, the live gate and the online fast loop all read it through `resolve`; its digest is part
of every RHI version and manifest, so a new calibration measures every day again.

With `health.calibration: null` the constants, weights and threshold of the config are used and no
component has a healthy range to be judged against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

COMPONENTS = ("dcs", "gvs", "mss", "cdrs", "lrps")


class CalibrationError(ValueError):
    """The calibration file is missing or does not hold what the health index needs."""


@dataclass(frozen=True)
class Resolved:
    """The health index's settings in force: the config's where it sets them, else the calibration's."""

    weights: dict[str, float]
    threshold: float
    threshold_name: str  # where the threshold comes from, for messages
    references: dict[str, Any]  # normalising constants by name (a dict by policy mode, or one number)
    healthy: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # component -> (lowest, highest) over the panel's healthy days
    broken: dict[str, tuple[float, float]] = field(default_factory=dict)
    source: str | None = None  # the calibration file, None: the config alone
    digest: str | None = None
    panel: dict[str, Any] = field(default_factory=dict)
    fast_loop: dict[str, float] = field(
        default_factory=dict
    )  # the online fast loop's skip_below, rollback_below, freeze_below chosen on the panel
    floors: dict[str, float] = field(
        default_factory=dict
    )  # component -> the value below which it alone refuses (placed on the panel)

    @property
    def threshold_text(self) -> str:
        """The threshold with where it comes from: "health.deploy_threshold 0.7", "the panel's threshold 0.55 (its
        file)"."""
        return f"{self.threshold_name} {self.threshold:g}" + (
            f" ({self.source})" if self.threshold_name == "the panel's threshold" else ""
        )

    def reference(self, name: str, mode: str | None = None) -> float:
        """Normalising constant `name` (for the adapter's policy `mode` where it has one per mode)."""
        value = self.references.get(name)
        if isinstance(value, dict):
            if mode in value:
                value = value[mode]
            elif "default" in value:
                value = value["default"]
            else:
                raise CalibrationError(
                    f"{self.source}: references.{name} has no value for policy mode {mode!r} (it has "
                    f"{', '.join(value)})"
                )
        if value is None:
            raise CalibrationError(f"no normalising constant {name!r} in {self.source or 'the config'}")
        return float(value)

    def verdict(self, name: str, value: float | None) -> str | None:
        """Where `value` of component `name` lies against the panel's healthy days, in words; None without a range."""
        if name not in self.healthy or value is None:
            return None
        lo, hi = self.healthy[name]
        if self.floored(name, value):
            return f"below the panel's floor {self.floors[name]:g} (healthy range {lo:.2f}-{hi:.2f}): it refuses"
        if value < lo:
            return f"below the healthy range {lo:.2f}-{hi:.2f}"
        if value > hi:
            return f"above the healthy range {lo:.2f}-{hi:.2f}"
        return f"in the healthy range {lo:.2f}-{hi:.2f}"

    def floored(self, name: str, value: float | None) -> str | None:
        """Why component `name` alone refuses at `value` (below its floor on the panel), in words; None if it does
        not."""
        if name not in self.floors or value is None or value >= self.floors[name]:
            return None
        lo, hi = self.healthy.get(name, (None, None))
        return f"{name.upper()} {value:.3f} below the panel's floor {self.floors[name]:g}" + (
            "" if lo is None else f" (its healthy range {lo:.2f}-{hi:.2f})"
        )

    def below(self, name: str, value: float | None) -> bool:
        return name in self.healthy and value is not None and value < self.healthy[name][0]


FAST_LOOP = ("skip_below", "rollback_below", "freeze_below")


@dataclass(frozen=True)
class Threshold:
    value: float
    name: str  # where it comes from, for messages: "online.skip_below", "the panel's skip_below"
    source: str | None = None  # the calibration file it comes from (None: the config)

    @property
    def text(self) -> str:
        return f"{self.name} {self.value:g}" + (f" ({self.source})" if self.source else "")


def fast_loop(cfg: Any) -> dict[str, Threshold]:
    """The online fast loop's thresholds on its partial RHI (skip_below, rollback_below, freeze_below): the
    config's `online.*` where set, else the calibration's `fast_loop.thresholds`; freeze <= rollback <= skip."""
    settings = resolve(cfg)
    out = {}
    for name in FAST_LOOP:
        own = getattr(cfg.online, name)
        if own is not None:
            out[name] = Threshold(float(own), f"online.{name}")
        elif name in settings.fast_loop:
            out[name] = Threshold(settings.fast_loop[name], f"the panel's {name}", settings.source)
        else:
            raise CalibrationError(
                f"online.{name} is null and {settings.source or 'no health.calibration'} gives none "
                "(fast_loop.thresholds); "
                f"set online.{name}, or write the calibration with `benchmarks/health_panel.py calibrate`"
            )
    values = [out[n].value for n in reversed(FAST_LOOP)]
    if values != sorted(values):
        raise CalibrationError(
            "the fast loop's thresholds must hold freeze_below <= rollback_below <= skip_below: "
            + ", ".join(out[n].text for n in reversed(FAST_LOOP))
        )
    return out


def below_range_text(components: dict[str, dict[str, Any]], below: list[str]) -> str:
    """The components named in `below`, each with its value and verdict ({name: {value, verdict}}, as the gate
    records them): "GVS 0.050 (below the healthy range 0.40-0.70), ..."; empty when none is below."""
    return ", ".join(
        f"{k.upper()} {c['value']:.3f} ({c['verdict']})"
        for k, c in components.items()
        if k in below and c.get("value") is not None
    )


def _pairs(section: Any, what: str, source: str) -> dict[str, tuple[float, float]]:
    out = {}
    for name, lohi in (section or {}).items():
        if name not in COMPONENTS + ("rhi",) or not isinstance(lohi, (list, tuple)) or len(lohi) != 2:
            raise CalibrationError(
                f"{source}: {what}.{name} must be one of {', '.join(COMPONENTS)} or rhi, with [lowest, highest]"
            )
        out[name] = (float(lohi[0]), float(lohi[1]))
    return out


@lru_cache(maxsize=16)
def _read(path: str, digest: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise CalibrationError(
            f"{path} is not YAML ({exc}); write it again with `benchmarks/health_panel.py calibrate`"
        ) from exc
    if not isinstance(data, dict):
        raise CalibrationError(f"{path} holds no mapping; write it again with `benchmarks/health_panel.py calibrate`")
    return data


def calibration_path(cfg: Any) -> Path | None:
    """The calibration file `health.calibration` names (None: off)."""
    name = cfg.health.calibration
    return None if name is None else cfg.path(name)


def calibration_digest(cfg: Any) -> str | None:
    """The calibration file's digest: part of the RHI stage's version ("missing" when it is not there)."""
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    return optional_file_digest(calibration_path(cfg))


def resolve(cfg: Any) -> Resolved:
    """The weights, threshold and constants the health index uses under `cfg` (the whole config or a
    stage's slice of it), with the panel's healthy ranges when a calibration is named."""
    from hominem_pipeline.core.pipeline.artifacts import file_sha256

    h = cfg.health
    path = calibration_path(cfg)
    if path is None:
        return Resolved(
            weights=h.weights.model_dump(),
            threshold=h.deploy_threshold,
            threshold_name="health.deploy_threshold",
            references={"gvi_max": h.gvi_max_reference},
        )
    if not path.is_file():
        raise CalibrationError(
            f"health.calibration names {path}, which is not there; write it with `.venv/bin/python "
            "benchmarks/health_panel.py "
            "calibrate --panel DIR`, or set health.calibration: null and health.weights, "
            "gvi_max_reference and deploy_threshold"
        )
    digest = file_sha256(path)
    data = _read(str(path), digest)
    source = str(cfg.health.calibration)
    weights = h.weights.model_dump() if h.weights is not None else data.get("weights")
    if (
        not isinstance(weights, dict)
        or set(weights) != set(COMPONENTS)
        or abs(sum(float(v) for v in weights.values()) - 1) > 1e-6
    ):
        raise CalibrationError(f"{source}: weights must give each of {', '.join(COMPONENTS)} a weight, summing to 1")
    if h.deploy_threshold is not None:
        threshold, name = h.deploy_threshold, "health.deploy_threshold"
    elif isinstance(data.get("threshold"), (int, float)):
        threshold, name = float(data["threshold"]), "the panel's threshold"
    else:
        raise CalibrationError(
            f"{source} has no threshold; write it again with `benchmarks/health_panel.py calibrate`"
        )
    references = dict(data.get("references") or {})
    if h.gvi_max_reference is not None:
        references["gvi_max"] = h.gvi_max_reference
    floors = data.get("floors") or {}
    if not isinstance(floors, dict) or not all(
        k in COMPONENTS and isinstance(v, (int, float)) for k, v in floors.items()
    ):
        raise CalibrationError(f"{source}: floors must map components ({', '.join(COMPONENTS)}) to numbers")
    fast = (data.get("fast_loop") or {}).get("thresholds") or {}
    if not isinstance(fast, dict) or not all(k in FAST_LOOP and isinstance(v, (int, float)) for k, v in fast.items()):
        raise CalibrationError(f"{source}: fast_loop.thresholds must map {', '.join(FAST_LOOP)} to numbers")
    return Resolved(
        weights={k: float(v) for k, v in weights.items()},
        threshold=threshold,
        threshold_name=name,
        references=references,
        healthy=_pairs(data.get("healthy"), "healthy", source),
        broken=_pairs(data.get("broken"), "broken", source),
        source=source,
        digest=digest,
        panel=dict(data.get("panel") or {}),
        fast_loop={k: float(v) for k, v in fast.items()},
        floors={} if h.deploy_threshold is not None else {k: float(v) for k, v in floors.items()},
    )  # a threshold of one's own: the index alone
