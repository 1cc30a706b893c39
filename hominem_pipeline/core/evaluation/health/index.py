"""The index: the components weighted into the RHI, with the deploy verdict, measured on one day's evaluation, and
its plot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from hominem_pipeline.core.evaluation.health.coherence import coherence
from hominem_pipeline.core.evaluation.health.components import COMPONENTS, Component, HealthReport
from hominem_pipeline.core.evaluation.health.robustness import cross_domain_robustness, local_reward_predictivity
from hominem_pipeline.core.evaluation.health.stability import gradient_variance_stability, manifold_stability
from hominem_pipeline.core.evaluation.noise import NoiseRule, PairedCheck, paired_check, reported
from hominem_pipeline.core.reward.model import RewardModel


def aggregate(components: dict[str, Component], cfg: Any, outcomes: Sequence[float] | None = None) -> HealthReport:
    """The weighted RHI and the deploy decision under `cfg`'s health settings and calibration
    (`calibration.resolve`): a full index at or above the threshold and, where the evaluation measured the
    adapter's per-prompt outcomes against the base (1 a win, 0.5 a tie, 0 a loss by the reward model), a win rate
    not below 50% beyond `health.win_rate_margin` at `health.confidence` (`noise.paired_check`: the RHI says the
    reward signal is healthy, not that the adapter is better than what is live without it). Each component is
    judged against the panel's healthy range, and a refusal names those below it. A component below its floor on
    the panel (the calibration's `floors`: where that component alone tells apart the broken days the other checks
    let through) refuses on its own."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    settings = resolve(cfg)
    weights = settings.weights
    measured = {k: c for k, c in components.items() if c.value is not None}
    missing = [k for k in COMPONENTS if k not in measured]
    total = sum(weights[k] for k in measured)
    rhi = sum(weights[k] * measured[k].value for k in measured) / total if total > 0 else None
    verdicts = {k: settings.verdict(k, c.value) for k, c in components.items()}
    low = [
        f"{k.upper()} {c.value:.3f} ({settings.healthy[k][0]:.2f}-{settings.healthy[k][1]:.2f})"
        for k, c in components.items()
        if settings.below(k, c.value)
    ]
    floored = [why for k, c in components.items() if (why := settings.floored(k, c.value))]
    threshold, name = settings.threshold, settings.threshold_name
    wins = win_rate_check(outcomes, cfg.health, "the base") if outcomes is not None and len(outcomes) else None
    if rhi is None:
        deployable, reason = False, "no component could be measured"
    elif missing:
        deployable, reason = False, f"partial index: {', '.join(missing)} not measured"
    elif rhi < threshold:
        deployable, reason = (
            False,
            f"RHI {rhi:.3f} below {settings.threshold_text}"
            + (f"; below the panel's healthy range: {', '.join(low)}" if low else "")
            + "".join(f"; {w}" for w in floored),
        )
    elif floored:
        deployable, reason = False, f"RHI {rhi:.3f} passes {settings.threshold_text}, but {'; '.join(floored)}"
    elif wins is not None and wins.refused:
        deployable, reason = False, f"RHI {rhi:.3f} passes, but {wins.reason()} (health.win_rate_margin)"
    else:
        deployable, reason = True, f"RHI {rhi:.3f} at or above {settings.threshold_text}"
        if wins is not None:
            reason += f"; {wins.line()}"
    return HealthReport(
        rhi=rhi,
        partial=bool(missing),
        missing=missing,
        components=components,
        deployable=deployable,
        reason=reason,
        win_rate=None if wins is None else wins.candidate,
        win_check=None if wins is None else wins.as_dict(),
        threshold=threshold,
        threshold_name=name,
        verdicts=verdicts,
        below_range=[k for k, c in components.items() if settings.below(k, c.value)],
        calibration=settings.source,
        calibration_digest=settings.digest,
    )


def win_rate_check(outcomes: Sequence[float], health: Any, against: str) -> PairedCheck:
    """The reward model's win rate over `against` (per-prompt outcomes: 1 a win, 0.5 a tie, 0 a loss) judged by the
    paired rule against a coin's 50% (`health.win_rate_margin`; null: reported with its +- at margin 0, not
    checked)."""
    margin = health.win_rate_margin
    rule = NoiseRule(0.0 if margin is None else margin, health.confidence, health.power)
    what = "win rate by the reward model"
    check = paired_check("win_rate", what, outcomes, [0.5] * len(outcomes), rule, f"{against} (a tie)")
    return check if margin is not None else reported(check)


def compute_health(
    reward_model: RewardModel,
    evaluation: pd.DataFrame,
    grad_norms: Sequence[float],
    cfg: Any,
    seed: int,
    mode: str | None = None,
    adapter: Any | None = None,
    device: Any = None,
) -> HealthReport:
    """The RHI of an adapter from its evaluation table, its training gradient norms and the reward model,
    under `cfg`'s health settings and calibration; `mode`: the adapter's policy mode (per-mode constants);
    `adapter`: its folder, loaded on `device` for DCS on the policy (`health.dcs_on`)."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    h = cfg.health
    settings = resolve(cfg)
    prompts = list(evaluation["prompt"])
    base = list(evaluation["base_response"])
    replies = list(evaluation["adapter_response"])
    answered = [i for i, r in enumerate(replies) if r.strip()]
    components = {
        "dcs": coherence(
            cfg, reward_model, [prompts[i] for i in answered], [replies[i] for i in answered], adapter, device
        ),
        "gvs": gradient_variance_stability(grad_norms, settings.reference("gvi_max", mode)),
        "mss": manifold_stability(
            reward_model,
            prompts,
            base,
            replies,
            h.perturbations_per_response,
            seed,
            settings.references.get("rdm_drift_max"),
            settings.references.get("curvature_variance_max"),
        ),
        "cdrs": cross_domain_robustness(evaluation, reward_model.dimensions, against="improvement"),
        "lrps": local_reward_predictivity(
            reward_model, [prompts[i] for i in answered], [replies[i] for i in answered]
        ),
    }
    outcomes = evaluation["adapter_outcome"].dropna() if "adapter_outcome" in evaluation else pd.Series(dtype=float)
    return aggregate(components, cfg, list(outcomes))


def plot_health(report: HealthReport, path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(COMPONENTS)
    values = [report.components[n].value for n in names]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(
        [n.upper() for n in names],
        [v if v is not None else 0 for v in values],
        color=["#1c7ed6" if v is not None else "#adb5bd" for v in values],
    )
    for i, v in enumerate(values):
        ax.text(i, (v or 0) + 0.02, "missing" if v is None else f"{v:.2f}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.1)
    rhi = "n/a" if report.rhi is None else f"{report.rhi:.3f}"
    ax.set_title(f"{title}  RHI {rhi}{' (partial)' if report.partial else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
