"""Drift between a recent window and the reference window before it.

- **Preference drift**: on people's choices, each dimension's agreement (the share where the chosen
  reply is higher on it, by the current reward model; ties count half), the reply's length (the share
  where the longer one was chosen) and the model's own agreement (its scalar), recent against
  reference, overall, per rater and per domain. A dimension drifts when the shift is both significant (two-proportion
  z >= `drift.z`) and large (>= `drift.min_shift`): what people reward has moved.
- **Served drift**: each dimension of the served replies' reward vectors (scored by the current model),
  recent against reference. A dimension drifts when the KS p-value is below `drift.served_p` and the
  Wasserstein distance is at least `drift.served_shift` reference standard deviations; PSI is reported
  beside (see `stats`): what the student says has moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.attune.stats import ks, proportion_shift, psi, wasserstein

LENGTH, MODEL = "length", "scalar"  # the pseudo-dimensions: the reply's length, and the model's own order
SUSPECTS = 2  # dimensions named when the model's agreement alone drifted


def windows(day: str, recent_days: int, reference_days: int) -> tuple[list[str], list[str]]:
    """(reference days, recent days) as ISO dates: the recent window ends on `day`, the reference one just before
    it."""
    end = pd.Timestamp(day)
    recent = [(end - pd.Timedelta(days=i)).date().isoformat() for i in range(recent_days)][::-1]
    start = end - pd.Timedelta(days=recent_days)
    reference = [(start - pd.Timedelta(days=i)).date().isoformat() for i in range(reference_days)][::-1]
    return reference, recent


def agreement_columns(pred: pd.DataFrame, dimensions: Sequence[str]) -> pd.DataFrame:
    """Per pair, 1 / 0.5 / 0 for each dimension (chosen higher / tied / lower), the length and the model's order."""
    out = {d: np.sign(pred[f"gap_{d}"].to_numpy(dtype=np.float64)) * 0.5 + 0.5 for d in dimensions}
    out[LENGTH] = (
        np.sign(pred["chosen_words"].to_numpy(dtype=np.float64) - pred["rejected_words"].to_numpy(dtype=np.float64))
        * 0.5
        + 0.5
    )
    out[MODEL] = pred["correct"].to_numpy(dtype=np.float64)
    return pd.DataFrame(out, index=pred.index)


def _describe(name: str, before: float, after: float) -> str:
    less_more = "more" if after > before else "less"
    change = f"{before:.0%} -> {after:.0%} of choices"
    if name == LENGTH:
        return (
            f"people now choose the longer reply {less_more} often ({change}): they favour "
            f"{'longer' if after > before else 'shorter'} replies"
        )
    if name == MODEL:
        return f"the reward model now agrees with people {less_more} often ({change})"
    return (
        f"people now choose the reply higher on {name} {less_more} often ({change}): {name} counts "
        f"{'more' if after > before else 'less'} for them"
    )


def preference_drift(
    reference: pd.DataFrame, recent: pd.DataFrame, dimensions: Sequence[str], cfg: Any
) -> list[dict[str, Any]]:
    """One entry per (rater or all, dimension) with both windows holding at least `cfg.min_choices`
    choices: before, after, shift, z, whether it `drifted`, and a sentence saying which way."""
    out = []
    scopes = [("all", reference, recent)]
    for column, prefix in (
        ("rater", ""),
        ("domain", "domain "),
    ):  # per rater and per domain, where there are several
        values = (
            sorted(set(recent[column].dropna()) | set(reference[column].dropna()))
            if column in recent and column in reference
            else []
        )
        if len(values) > 1:  # one alone is the whole
            scopes += [
                (f"{prefix}{v}", reference[reference[column] == v], recent[recent[column] == v]) for v in values
            ]
    for scope, old, new in scopes:
        if len(old) < cfg.min_choices or len(new) < cfg.min_choices:
            continue
        a, b = agreement_columns(old, dimensions), agreement_columns(new, dimensions)
        rows = []
        for name in [*dimensions, LENGTH, MODEL]:
            s = proportion_shift(float(a[name].sum()), len(a), float(b[name].sum()), len(b))
            drifted = abs(s.z) >= cfg.z and abs(s.shift) >= cfg.min_shift
            rows.append(
                {
                    "scope": scope,
                    "dimension": name,
                    "reference": len(a),
                    "recent": len(b),
                    "before": s.before,
                    "after": s.after,
                    "shift": s.shift,
                    "z": s.z,
                    "drifted": bool(drifted),
                    "direction": "up" if s.shift > 0 else "down",
                    "says": _describe(name, s.before, s.after),
                    "suspects": [],
                }
            )
        model = rows[-1]
        if model["drifted"] and not any(r["drifted"] for r in rows[:-1]):
            # the model's agreement fell before any one dimension's share moved past the thresholds: name the ones that
            # moved most
            moved = sorted(rows[:-1], key=lambda r: -abs(r["z"]))[:SUSPECTS]
            model["suspects"] = [f"{r['dimension']} {r['direction']}" for r in moved]
            model["says"] += "; moved most: " + ", ".join(
                f"{r['dimension']} ({r['before']:.0%} -> {r['after']:.0%}, z {r['z']:+.1f})" for r in moved
            )
        out += rows
    return out


def served_drift(
    reference: np.ndarray, recent: np.ndarray, dimensions: Sequence[str], cfg: Any
) -> list[dict[str, Any]]:
    """Per dimension of the served replies' vectors ((n, D) arrays): PSI, KS statistic and p-value,
    Wasserstein distance (and in reference standard deviations), the means, and whether it `drifted`;
    [] when a window has fewer than `cfg.min_served` replies."""
    if len(reference) < cfg.min_served or len(recent) < cfg.min_served:
        return []
    out = []
    for j, name in enumerate(dimensions):
        r, q = reference[:, j], recent[:, j]
        test = ks(r, q)
        sd = float(np.std(r))
        w = wasserstein(r, q)
        w_sd = w / sd if sd > 0 else (0.0 if w == 0 else float("inf"))
        drifted = test.p_value < cfg.served_p and w_sd >= cfg.served_shift
        before, after = float(np.mean(r)), float(np.mean(q))
        out.append(
            {
                "dimension": name,
                "reference": len(r),
                "recent": len(q),
                "psi": psi(r, q),
                "ks": test.statistic,
                "p_value": test.p_value,
                "wasserstein": w,
                "wasserstein_sd": w_sd,
                "before": before,
                "after": after,
                "drifted": bool(drifted),
                "direction": "up" if after > before else "down",
                "says": f"served replies score {'higher' if after > before else 'lower'} on {name} "
                f"({before:+.3f} -> {after:+.3f}, {w_sd:.2f} sd)",
            }
        )
    return out
