"""Error clusters: the people's pairs the current model orders against the person, clustered and
named by what their members share, and followed from one day to the next.

A pair's features are three blocks, each scaled to unit length so that none drowns the others: the
shipped encoder's embedding of the prompt (what it is about), each dimension's gap chosen - rejected
in the window's standard deviations (which dimension sided with the rejected reply) and the length
gap (a person choosing the shorter reply). k-means with the number of clusters chosen by silhouette
(2 to `max_clusters`). A cluster is named by its prompts' distinctive terms (TF-IDF against the other
errors), its domain, the tag or category its members share, the length gap and the dimension that
disagreed most. A cluster continues yesterday's when their centroids' cosine is at least
`match_similarity`: it grew, shrank or held; yesterday's with no successor closed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.attune.predictions import Embed, _last_message, _unit

COLUMNS = [
    "cluster",
    "status",
    "size",
    "previous_size",
    "name",
    "terms",
    "domain",
    "tag",
    "length_gap",
    "dimension",
    "dimension_gap",
    "examples",
    "centroid",
]


def features(
    errors: pd.DataFrame, dimensions: Sequence[str], scale: dict[str, float], embed: Embed | None
) -> np.ndarray:
    """(n, width) features of the error pairs: the prompt embedding, the dimension gaps and the length gap, each
    block unit-length."""
    blocks = []
    if embed is not None:
        blocks.append(_unit(embed([_last_message(p) for p in errors["prompt"]])))
    gaps = np.stack(
        [errors[f"gap_{d}"].to_numpy(dtype=np.float64) / max(scale.get(d, 1.0), 1e-9) for d in dimensions], 1
    )
    blocks.append(_unit(gaps))
    length = (
        errors["chosen_words"].to_numpy(dtype=np.float64) - errors["rejected_words"].to_numpy(dtype=np.float64)
    ) / max(scale.get("length", 1.0), 1e-9)
    blocks.append(np.tanh(length)[:, None])
    return np.concatenate(blocks, 1)


def _choose_k(x: np.ndarray, max_clusters: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n = len(x)
    best, labels = -2.0, np.zeros(n, dtype=int)
    for k in range(2, min(max_clusters, n - 1) + 1):
        fit = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
        if len(set(fit.labels_)) < 2:
            continue
        score = silhouette_score(x, fit.labels_)
        if score > best:
            best, labels = score, fit.labels_
    return labels


def _terms(members: list[str], others: list[str], top: int = 3) -> list[str]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        tfidf = TfidfVectorizer(stop_words="english", token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b")
        matrix = tfidf.fit_transform(members + others)
    except ValueError:  # nothing but stop words
        return []
    inside = np.asarray(matrix[: len(members)].mean(0)).ravel()
    outside = np.asarray(matrix[len(members) :].mean(0)).ravel() if others else np.zeros_like(inside)
    score = inside - outside
    names = tfidf.get_feature_names_out()
    return [names[i] for i in np.argsort(-score)[:top] if score[i] > 0]


def _most(values: Sequence[Any]) -> tuple[str | None, float]:
    kept = [v for v in values if v is not None and v == v]
    if not kept:
        return None, 0.0
    value, count = Counter(kept).most_common(1)[0]
    return str(value), count / len(values)


def cluster_errors(
    errors: pd.DataFrame, dimensions: Sequence[str], scale: dict[str, float], embed: Embed | None, cfg: Any, seed: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """(one row per cluster, largest first, with its name, parts and examples; each error's cluster row).
    Empty with fewer than `cfg.min_errors` errors."""
    if len(errors) < cfg.min_errors:
        return pd.DataFrame(columns=COLUMNS), np.full(len(errors), -1)
    errors = errors.reset_index(drop=True)
    x = features(errors, dimensions, scale, embed)
    labels = _choose_k(x, cfg.max_clusters, seed)
    texts = [_last_message(p) for p in errors["prompt"]]
    rows = []
    for label in sorted(set(labels), key=lambda k: -int((labels == k).sum())):
        inside = labels == label
        part = errors[inside]
        terms = _terms([t for t, m in zip(texts, inside) if m], [t for t, m in zip(texts, inside) if not m])
        domain, domain_share = _most(list(part["domain"]))
        tag, _ = _most(list(part["tag"].where(part["tag"].notna(), part["category"])))
        length_gap = float((part["chosen_words"] - part["rejected_words"]).mean())
        dim_gaps = {d: float(part[f"gap_{d}"].mean()) for d in dimensions}
        dimension = min(dim_gaps, key=dim_gaps.get)
        name = " · ".join(
            filter(
                None,
                [
                    ", ".join(terms) or None,
                    f"{domain} ({domain_share:.0%})" if domain else None,
                    f"tag {tag}" if tag else None,
                    f"chosen {abs(length_gap):.0f} words {'shorter' if length_gap < 0 else 'longer'}"
                    if abs(length_gap) >= 1
                    else None,
                    f"{dimension} sided with the rejected reply" if dim_gaps[dimension] < 0 else None,
                ],
            )
        )
        order = np.argsort(-np.abs(part["gap"].to_numpy(dtype=np.float64)))[
            : cfg.examples
        ]  # the most confident mistakes
        examples = [
            {
                "pair_id": str(r["pair_id"]),
                "prompt": _last_message(str(r["prompt"]))[:300],
                "chosen": str(r["chosen"])[:300],
                "rejected": str(r["rejected"])[:300],
                "p_chosen": float(r["p_chosen"]),
                "rater": None
                if pd.isna(r.get("rater"))
                else str(r.get("rater")),  # whose words: the dashboard's scope
            }
            for _, r in part.iloc[order].iterrows()
        ]
        rows.append(
            {
                "cluster": int(label),
                "status": "new",
                "size": int(inside.sum()),
                "previous_size": 0,
                "name": name or f"cluster {label}",
                "terms": terms,
                "domain": domain,
                "tag": tag,
                "length_gap": length_gap,
                "dimension": dimension,
                "dimension_gap": dim_gaps[dimension],
                "examples": examples,
                "centroid": x[inside].mean(0).tolist(),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS), labels


def follow(today: pd.DataFrame, yesterday: pd.DataFrame | None, day: str, match_similarity: float) -> pd.DataFrame:
    """Today's clusters with stable ids (a continued cluster keeps yesterday's, a new one `<day>-<n>`)
    and a status: new, grew, shrank, held; yesterday's clusters no one continues come back as closed rows."""
    today = today.copy()
    today["cluster"] = [f"{day}-{i}" for i in range(len(today))]
    if yesterday is None or not len(yesterday):
        return today
    old = yesterday[yesterday["status"] != "closed"].reset_index(drop=True)
    taken: set[int] = set()
    if len(today) and len(old):
        a, b = _unit(np.stack(today["centroid"].map(np.asarray))), _unit(np.stack(old["centroid"].map(np.asarray)))
        sims = a @ b.T if a.shape[1] == b.shape[1] else np.full((len(a), len(b)), -1.0)
        for i, j in sorted(np.ndindex(sims.shape), key=lambda ij: -sims[ij]):
            if sims[i, j] < match_similarity or j in taken or today.at[i, "status"] != "new":
                continue
            taken.add(j)
            before, now = int(old.at[j, "size"]), int(today.at[i, "size"])
            today.at[i, "cluster"] = old.at[j, "cluster"]
            today.at[i, "previous_size"] = before
            today.at[i, "status"] = "grew" if now > before else ("shrank" if now < before else "held")
    closed = old.drop(index=sorted(taken)).assign(status="closed", previous_size=lambda f: f["size"], size=0)
    return pd.concat([today, closed[COLUMNS]], ignore_index=True) if len(closed) else today
