"""Correlations that report "not measurable" (None) instead of NaN when an input has no variance."""

from __future__ import annotations

import numpy as np
import pandas as pd


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 3 or np.std(a) < 1e-12 or np.std(b) < 1e-12:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    return pearson(pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy())
