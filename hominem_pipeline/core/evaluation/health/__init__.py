"""The Reward Health Index.

RHI = w1*DCS + w2*GVS + w3*MSS + w4*CDRS + w5*LRPS, every component in [0, 1]. Each component is
measured on what the run produced and reported with how it was measured; one that cannot be measured
(too little data) is reported as missing, and RHI is then the weighted mean of the measured ones,
flagged `partial`, never filled with a made-up number.

The parts: `components` (the report's types), `coherence` (DCS), `stability` (GVS, MSS), `robustness` (CDRS,
LRPS), `index` (the weighted index and its verdict).
"""

from hominem_pipeline.core.evaluation.health.coherence import (
    coherence,
    coherence_of,
    dcs_of,
    dimensional_coherence,
    gradient_agreement,
    policy_coherence,
    policy_gradient_agreement,
)
from hominem_pipeline.core.evaluation.health.components import COMPONENTS, Component, HealthReport
from hominem_pipeline.core.evaluation.health.index import aggregate, compute_health, plot_health
from hominem_pipeline.core.evaluation.health.robustness import (
    cross_domain_robustness,
    first_half,
    local_reward_predictivity,
    predictivity_of,
)
from hominem_pipeline.core.evaluation.health.stability import (
    gradient_variance_stability,
    manifold_stability,
    perturb,
    perturbations,
    stability_of,
)

__all__ = [
    "COMPONENTS",
    "Component",
    "HealthReport",
    "gradient_agreement",
    "dimensional_coherence",
    "coherence_of",
    "policy_gradient_agreement",
    "policy_coherence",
    "coherence",
    "dcs_of",
    "gradient_variance_stability",
    "perturb",
    "manifold_stability",
    "perturbations",
    "stability_of",
    "cross_domain_robustness",
    "local_reward_predictivity",
    "first_half",
    "predictivity_of",
    "aggregate",
    "compute_health",
    "plot_health",
]
