"""What a fit of the heads gives back, whichever way they were fitted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hominem_pipeline.core.reward.combination import ScalarCombination


@dataclass
class HeadsFit:
    """The fitted heads (in the network, and their state) with their held-out figures.

    Args:
        full: the held-out predictions of each head, indexed by sequence (out of fold for a ridge fit, the
            validation split's for a gradient fit).
        metrics: the held-out figures of `full` and the fit's own (penalty, pull, weights).
        history: one row per ridge penalty tried, or per epoch.
        best_epoch: the history row whose fit was kept (1-based).
        state: the network's state at that row.
        combination: the combined scalar's weights (`scalar: combined`), else None.
        people_weight: the people's score's weight in the scalar (0 without one).
    """

    full: dict[str, np.ndarray]
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    best_epoch: int
    state: dict[str, torch.Tensor]
    combination: ScalarCombination | None = None
    people_weight: float = 0.0
