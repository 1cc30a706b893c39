"""What the dashboard shows, read only from the project's files: each
asset's versions (`data/<asset>/<day>/<version>/manifest.json` and the files beside it) and the live
history. The service's `/dashboard` routes serve these as JSON; nothing here writes.

Manifests are read once each and kept by path (a version never changes once published); a day's folder
is listed again only when its modification time changes, so a view over 90 days costs a few hundred
`stat` calls once warm.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.pipeline.artifacts import MANIFEST

# the RHI's components and what a value means
COMPONENTS = {
    "dcs": (
        "Dimensional coherence",
        "how far the dimensions' reward gradients point the same way; low: dimensions fighting each other",
    ),
    "gvs": (
        "Gradient variance stability",
        "how steady the adapter's gradient norms were in training; low: unstable updates",
    ),
    "mss": (
        "Manifold stability",
        "how little the reward geometry moves under small rewrites of the replies; low: a brittle, curved manifold",
    ),
    "cdrs": (
        "Cross-domain robustness",
        "how consistently the dimensions behave across prompt categories; low: contradictions between domains",
    ),
    "lrps": (
        "Local reward predictivity",
        "how well the reward of a reply predicts that of its trajectory; low: the evaluator is not tracking outcomes",
    ),
}
PATTERNS = [
    (
        "sharp drop",
        "dimensions fighting: a new reward signal pulls the dimensions apart (look at DCS and reward collisions)",
    ),
    ("oscillation", "curvature instability: the manifold bends from update to update (look at MSS)"),
    (
        "flat near 0.5",
        "the evaluator failing: its components carry no information (look at LRPS and the reward "
        "model's agreement with people)",
    ),
    ("flat near 1.0", "extremely healthy"),
]
TIMELINE = {  # series name -> (asset, metric)
    "people_agreement": ("attunement", "people_agreement"),
    "people_ece": ("attunement", "people_ece"),
    "judge_agreement": ("attunement", "judge_agreement"),
    "judge_ece": ("attunement", "judge_ece"),
    "served_agreement": ("attunement", "served_agreement"),
    "rhi": ("reward_health_index", "rhi"),
    **{c: ("reward_health_index", c) for c in COMPONENTS},
    "win_rate": ("evaluation", "win_rate"),
    "people_accuracy": ("evaluation", "people_accuracy"),
    "memory_kept": ("evaluation", "memory_kept"),
    "memory_lost": ("evaluation", "memory_lost"),
    "fixture_accuracy": ("reward_model", "fixture_accuracy"),
    "probe_tradeoffs_as_expected": ("probes", "probe_tradeoffs_as_expected"),
    "probe_adversarial_max_flip_rate": ("probes", "probe_adversarial_max_flip_rate"),
}


class DashboardData:
    """The dashboard's views over one project's data folder."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self._manifests: dict[Path, dict[str, Any]] = {}
        self._days: dict[Path, tuple[float, list[Path]]] = {}
        self._lock = threading.Lock()

    # --- reading ------------------------------------------------------------------------------------

    def versions(self, asset: str) -> list[dict[str, Any]]:
        """Every complete version of `asset`, oldest day first, each its manifest plus `path`."""
        root = self.data_dir / asset
        if not root.is_dir():
            return []
        out = []
        with self._lock:
            for day in sorted(p for p in root.iterdir() if p.is_dir()):
                mtime = day.stat().st_mtime
                cached = self._days.get(day)
                if cached is None or cached[0] != mtime:
                    cached = (mtime, sorted(p for p in day.iterdir() if (p / MANIFEST).is_file()))
                    self._days[day] = cached
                for folder in cached[1]:
                    m = self._manifests.get(folder)
                    if m is None:
                        try:
                            m = {**json.loads((folder / MANIFEST).read_text()), "path": str(folder)}
                        except (OSError, ValueError):
                            continue
                        self._manifests[folder] = m
                    if m.get("complete", True):
                        out.append(m)
        return out

    def newest_per_day(self, asset: str) -> dict[str, dict[str, Any]]:
        """Per day, the version of `asset` built last."""
        out: dict[str, dict[str, Any]] = {}
        for m in self.versions(asset):
            if m["partition"] not in out or m.get("created_at", "") > out[m["partition"]].get("created_at", ""):
                out[m["partition"]] = m
        return out

    def live_history(self) -> list[dict[str, Any]]:
        path = self.data_dir / "live" / "history.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else []
        except (OSError, ValueError):
            return []

    # --- views --------------------------------------------------------------------------------------

    def timeline(self) -> dict[str, Any]:
        """Per day, the figures of the day's newest versions (agreement with people, ECE, RHI and its
        components, win rate, facts kept, ...), the versions they come from, and the live history's events."""
        per = {a: self.newest_per_day(a) for a in {a for a, _ in TIMELINE.values()} | {"lora_adapter"}}
        days = sorted(set().union(*(set(v) for v in per.values()))) if per else []
        series = {
            name: [(per[a].get(d) or {}).get("metrics", {}).get(metric) for d in days]
            for name, (a, metric) in TIMELINE.items()
        }
        versions = [{a: (per[a].get(d) or {}).get("version") for a in ("reward_model", "lora_adapter")} for d in days]
        events = [
            {
                "time": e.get("time"),
                "day": (e.get("time") or "")[:10],
                "action": e.get("action"),
                "version": e.get("version"),
                "reason": e.get("reason"),
                "by": e.get("by"),
            }
            for e in self.live_history()
            if e.get("action") in ("promote", "rollback", "refuse", "freeze", "unfreeze", "adjust")
        ]
        return {"days": days, "series": series, "versions": versions, "events": events, "builds": self.builds()}

    def builds(self, last: int = 60) -> list[dict[str, Any]]:
        """Per version (not only each day's newest), the `last` reward models and adapters built, newest first:
        when, from what, their own figures and those of the attunement or evaluation that read them, and what
        the live history did with an adapter (promoted, refused, rolled back)."""
        by_input = {
            up: {self._input(m, up): m for m in self.versions(asset)}
            for asset, up in (("attunement", "reward_model"), ("evaluation", "lora_adapter"))
        }
        live: dict[str, list[str]] = {}
        for e in self.live_history():
            if e.get("action") in ("promote", "rollback", "refuse") and e.get("version"):
                live.setdefault(str(e["version"]).rstrip("/").split("/")[-1], []).append(e["action"])
        rows = []
        for asset, figures, read, read_figures in (
            (
                "reward_model",
                ("fixture_accuracy", "people_accuracy"),
                "reward_model",
                ("people_agreement", "people_ece"),
            ),
            ("lora_adapter", (), "lora_adapter", ("win_rate", "people_accuracy", "memory_kept")),
        ):
            for m in self.versions(asset):
                label = f"{asset}/{m['partition']}/{m['version']}"
                seen = by_input[read].get(label) or {}
                rows.append(
                    {
                        "asset": asset,
                        "day": m["partition"],
                        "version": m["version"],
                        "created_at": m.get("created_at"),
                        "reward_model": self._input(m, "reward_model") if asset == "lora_adapter" else None,
                        "figures": {
                            **{k: m.get("metrics", {}).get(k) for k in figures},
                            **{k: (seen.get("metrics") or {}).get(k) for k in read_figures},
                        },
                        "live": live.get(m["version"], []),
                    }
                )
        return sorted(rows, key=lambda r: r.get("created_at") or "", reverse=True)[:last]

    def calibration(self, last: int = 8) -> dict[str, Any]:
        """The reliability curve of each reward model version (the attunement of the day it served),
        people's choices and the judge's pairs apart, for the `last` days."""
        curves = []
        for day, m in sorted(self.newest_per_day("attunement").items())[-last:]:
            try:
                summary = json.loads((Path(m["path"]) / "attunement.json").read_text())
            except (OSError, ValueError):
                continue
            for group in ("people", "judge"):
                report = (summary.get("calibration") or {}).get(group)
                if report:
                    curves.append(
                        {
                            "day": day,
                            "reward_model": summary.get("reward_model"),
                            "group": group,
                            "ece": report["ece"],
                            "pairs": report["pairs"],
                            "agreement": report["agreement"],
                            "bins": [
                                {"confidence": b["confidence"], "accuracy": b["accuracy"], "count": b["count"]}
                                for b in report["bins"]
                                if b["count"]
                            ],
                        }
                    )
        return {"curves": curves}

    def drift(self, rater: str | None = None) -> dict[str, Any]:
        """The newest attunement's drift (the dimensions that moved, and how) and its error clusters with
        examples. With `rater` (a rater's token, not an admin's), a cluster's examples are only that person's own
        pairs: the figures are everyone's, the words their own."""
        newest = self.newest_per_day("attunement")
        if not newest:
            return {"day": None, "drift": None, "clusters": [], "asked": self.asked()}
        day, m = max(newest.items())
        folder = Path(m["path"])
        summary = json.loads((folder / "attunement.json").read_text())
        clusters: list[dict[str, Any]] = []
        if (folder / "clusters.parquet").is_file():
            frame = pd.read_parquet(folder / "clusters.parquet")
            clusters = json.loads(frame.drop(columns=["centroid"], errors="ignore").to_json(orient="records"))
            if rater is not None:
                for c in clusters:
                    shown = [e for e in c.get("examples") or [] if e.get("rater") == rater]
                    c["examples"], c["examples_hidden"] = shown, len(c.get("examples") or []) - len(shown)
        return {
            "day": day,
            "reward_model": summary.get("reward_model"),
            "drift": summary.get("drift"),
            "clusters": clusters,
            "errors": summary.get("errors"),
            "asked": self.asked(),
        }

    def asked(self, points: int = 200) -> dict[str, Any]:
        """The answers to the pairs the service asked (`GET /feedback/next`), in the order given (each day's newest
        `human_feedback`): the expected information they brought, summed, and what as many answers picked at random
        would have brought (their count x the mean value of the answers the random share picked). At most `points`
        points."""
        values, by = [], []
        for _, m in sorted(self.newest_per_day("human_feedback").items()):
            path = Path(m["path"]) / "pairs.parquet"
            if not path.is_file():
                continue
            import pyarrow.parquet as pq

            if not {"asked_value", "asked_by"} <= set(pq.read_schema(path).names):
                continue  # built before answers recorded how they were asked
            frame = pd.read_parquet(path, columns=["asked_value", "asked_by"])  # not the pairs' texts
            frame = frame[frame["asked_value"].notna()]
            values += frame["asked_value"].astype(float).tolist()
            by += frame["asked_by"].fillna("information").astype(str).tolist()
        random = [v for v, b in zip(values, by) if b == "random"]
        rate = sum(random) / len(random) if random else None
        n = len(values)
        keep = (
            list(range(n)) if n <= points else sorted(set(np.linspace(0, n - 1, points).round().astype(int).tolist()))
        )
        total = np.cumsum(values) if n else np.zeros(0)
        return {
            "answers": n,
            "by_information": n - len(random),
            "at_random": len(random),
            "random_rate": rate,
            "count": [i + 1 for i in keep],
            "as_asked": [float(total[i]) for i in keep],
            "if_at_random": None if rate is None else [(i + 1) * rate for i in keep],
        }

    def health(self) -> dict[str, Any]:
        """The newest RHI, each component with its value and what it means, the trend's pattern over
        the last days, what the fast loop (gate, rollbacks, freezes) did, the slow loop's nights, the
        steps in force and its last actions, and the retrain sensor's last tick (`core/pipeline/retrain.py`)."""
        from hominem_pipeline.core.online.slow_loop import status as slow_status
        from hominem_pipeline.core.pipeline.retrain import read_state

        per = self.newest_per_day("reward_health_index")
        days = sorted(per)
        rhi = [per[d]["metrics"].get("rhi") for d in days]
        latest = per[days[-1]] if days else None
        components = []
        meta = latest.get("metadata", {}) if latest else {}
        verdicts, below = meta.get("against_the_panel") or {}, set(meta.get("below_healthy_range") or [])
        if latest:
            for key, (name, meaning) in COMPONENTS.items():
                components.append(
                    {
                        "key": key,
                        "name": name,
                        "value": latest["metrics"].get(key),
                        "meaning": meaning,
                        "verdict": verdicts.get(key),
                        "below": key in below,
                    }
                )
        actions = [
            e
            for e in self.live_history()
            if e.get("action") in ("refuse", "rollback", "freeze", "unfreeze", "promote", "adjust")
        ][-20:]
        return {
            "day": days[-1] if days else None,
            "rhi": rhi[-1] if rhi else None,
            "deploy": None if not latest else latest["metrics"].get("deployable"),
            "threshold": meta.get("threshold"),
            "threshold_from": meta.get("threshold_from"),
            "reason": meta.get("reason"),
            "calibration": meta.get("calibration"),
            "components": components,
            "pattern": pattern(rhi),
            "patterns": [{"pattern": p, "means": m} for p, m in PATTERNS],
            "trend": {"days": days, "rhi": rhi},
            "actions": [
                {
                    "time": e.get("time"),
                    "action": e.get("action"),
                    "version": e.get("version"),
                    "reason": e.get("reason"),
                }
                for e in actions
            ],
            "slow_loop": slow_status(
                self.data_dir, None, dt.datetime.now(dt.timezone.utc).date().isoformat(), last=14
            ),
            "retrain": read_state(self.data_dir),
            "gate": self.gate_checks(),
            "gate_trend": self.gate_trend(),
        }

    def gate_checks(self) -> dict[str, Any]:
        """The sampled checks of the gate that decided what is served (see `promotion.gate_lines`): each with its
        figure, the compared model's, the difference +- its standard error, the smallest drop it detects and its
        verdict."""
        from hominem_pipeline.core.online.promotion import decisive_gate

        entry = decisive_gate(self.data_dir)
        if entry is None:
            return {"version": None, "checks": []}
        checks = (entry.get("gate") or {}).get("checks") or {}
        return {
            "version": entry.get("version"),
            "action": entry.get("action"),
            "time": entry.get("time"),
            "checks": list(checks.values()),
        }

    def gate_trend(self, last: int = 60) -> dict[str, Any]:
        """The last `last` gates that weighed a candidate (promoted or refused), oldest first: when, which version,
        what was decided, and each sampled check's figure for the candidate (a person's taste share `taste:<rater>` and
        held-out choices `choices:<rater>`, recall, facts, instructions kept, sameness, the people's pairs); None where
        a gate did not measure it."""
        entries = [
            e
            for e in self.live_history()
            if e.get("action") in ("promote", "refuse") and (e.get("gate") or {}).get("checks")
        ][-last:]
        names: dict[str, str] = {}
        for e in entries:
            for name, c in e["gate"]["checks"].items():
                names.setdefault(name, c.get("what") or name)
        return {
            "gates": [{"time": e.get("time"), "version": e.get("version"), "action": e["action"]} for e in entries],
            "series": {
                name: {
                    "what": what,
                    "values": [(e["gate"]["checks"].get(name) or {}).get("candidate") for e in entries],
                }
                for name, what in names.items()
            },
        }

    def options(self) -> dict[str, Any]:
        """The versions a comparison can pick: reward models (with a probes version) and adapters (with an
        evaluation)."""
        probes = {self._input(m, "reward_model"): m for m in self.versions("probes")}
        evals = {self._input(m, "lora_adapter"): m for m in self.versions("evaluation")}
        return {
            "reward_models": [
                {"label": k, "day": v["partition"]}
                for k, v in sorted(probes.items(), key=lambda kv: kv[1]["partition"])
                if k
            ],
            "adapters": [
                {"label": k, "day": v["partition"]}
                for k, v in sorted(evals.items(), key=lambda kv: kv[1]["partition"])
                if k
            ],
        }

    @staticmethod
    def _input(m: dict[str, Any], asset: str) -> str | None:
        refs = [r for r in m.get("inputs", {}).get(asset, []) if r.get("partition") == m["partition"]]
        return f"{asset}/{refs[0]['partition']}/{refs[0]['version']}" if refs else None

    def compare(self, kind: str, a: str, b: str) -> dict[str, Any]:
        """Two reward models (their probing suites side by side: the figures, each trade-off's choice,
        each counterfactual's move) or two adapters (their evaluations: figures, and both replies per prompt
        they share, with the reward model's scalars)."""
        if kind == "reward_models":
            sides = {label: self._by_input("probes", "reward_model", label) for label in (a, b)}
            out: dict[str, Any] = {
                "kind": kind,
                "a": a,
                "b": b,
                "metrics": {k: m and m["metrics"] for k, m in sides.items()},
            }
            tables = {k: m and _read(Path(m["path"]) / "tradeoffs.parquet") for k, m in sides.items()}
            if all(t is not None for t in tables.values()):
                ta, tb = tables[a], tables[b]
                merged = ta.merge(tb, on="id", suffixes=("_a", "_b"))
                out["tradeoffs"] = [
                    {
                        "id": r.id,
                        "trade": r.trade_a,
                        "expected": r.expected_a,
                        "a": r.choice_a,
                        "b": r.choice_b,
                        "gap_a": r.scalar_gap_a,
                        "gap_b": r.scalar_gap_b,
                    }
                    for r in merged.itertuples()
                ]
            cfs = {k: m and _read(Path(m["path"]) / "counterfactuals.parquet") for k, m in sides.items()}
            if all(c is not None for c in cfs.values()):
                merged = cfs[a].merge(cfs[b], on="id", suffixes=("_a", "_b"))
                out["counterfactuals"] = [
                    {
                        "id": r.id,
                        "dimension": r.dimension_a,
                        "direction": r.direction_a,
                        "moved_a": r.moved_a,
                        "moved_b": r.moved_b,
                    }
                    for r in merged.itertuples()
                ]
            return out
        if kind == "adapters":
            sides = {label: self._by_input("evaluation", "lora_adapter", label) for label in (a, b)}
            out = {"kind": kind, "a": a, "b": b, "metrics": {k: m and m["metrics"] for k, m in sides.items()}}
            merged = self.adapter_replies(a, b)
            if merged is not None:
                out["replies"] = json.loads(merged.to_json(orient="records"))
                out["scored_by"] = {k: m and self._input(m, "reward_model") for k, m in sides.items()}
            return out
        raise ValueError(f"kind is {kind!r}; compare reward_models or adapters")

    def adapter_replies(self, a: str, b: str) -> pd.DataFrame | None:
        """The two adapters' replies to the prompts both evaluations share (`prompt`, `adapter_response_a/_b`,
        `adapter_scalar_a/_b`: each scalar by its own evaluation's reward model), or None if either has none."""
        gens = [
            _read(Path(m["path"]) / "generations.parquet") if m else None
            for m in (self._by_input("evaluation", "lora_adapter", label) for label in (a, b))
        ]
        if any(g is None for g in gens):
            return None
        cols = ["prompt", "adapter_response", "adapter_scalar"]
        ga, gb = (g[[c for c in cols if c in g]].drop_duplicates("prompt") for g in gens)
        return ga.merge(gb, on="prompt", suffixes=("_a", "_b"))

    def _by_input(self, asset: str, upstream: str, label: str) -> dict[str, Any] | None:
        found = [m for m in self.versions(asset) if self._input(m, upstream) == label]
        return max(found, key=lambda m: m.get("created_at", "")) if found else None


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.is_file() else None


def pattern(values: list[float | None], window: int = 5) -> str | None:
    """Which pattern the last `window` RHI values show: a sharp drop (the last fell by 0.1 or more),
    oscillation (three or more sign changes of the day-to-day change), flat near 0.5 or near 1.0 (within
    0.05 of it throughout), else None."""
    v = [x for x in values if x is not None][-window:]
    if len(v) < 2:
        return None
    if v[-2] - v[-1] >= 0.1:
        return "sharp drop"
    steps = [b - a for a, b in zip(v, v[1:])]
    if sum(1 for s, t in zip(steps, steps[1:]) if s * t < 0) >= 3:
        return "oscillation"
    for level, name in ((0.5, "flat near 0.5"), (1.0, "flat near 1.0")):
        if len(v) >= 3 and all(abs(x - level) <= 0.05 for x in v):
            return name
    return None
