"""The probing suite run whole on one reward model (`probes` asset, `hominem probe --suite`): trade-offs
against the version before, adversarial consistency on contrast fixtures, counterfactuals, attribution of a
few replies, and the manifold's shape (PCA map, dimension correlations, reward collisions). Every figure
is written to a folder, summarised in `probes.json` and flattened into metrics."""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.evaluation import probes

log = logging.getLogger(__name__)

SUMMARY = "probes.json"
TRADEOFFS, ADVERSARIAL, COUNTERFACTUALS = "tradeoffs.parquet", "adversarial.parquet", "counterfactuals.parquet"
ATTRIBUTION, ATTRIBUTION_TABLE = "attribution.html", "attribution.parquet"
MAP, CORRELATIONS = "manifold_map.parquet", "correlations.parquet"
MAP_PLOT, SUITE_PLOT = "manifold_map.png", "probes.png"
FILES = (
    SUMMARY,
    TRADEOFFS,
    ADVERSARIAL,
    COUNTERFACTUALS,
    ATTRIBUTION,
    ATTRIBUTION_TABLE,
    MAP,
    CORRELATIONS,
    MAP_PLOT,
    SUITE_PLOT,
)


def _sample(n: int, k: int, seed: int) -> list[int]:
    """`k` of `n` indices, in order, drawn by `seed` (all when k >= n)."""
    return list(range(n)) if k >= n else sorted(random.Random(seed).sample(range(n), k))


class _Clock:
    """Each probe's seconds, logged as it finishes (the suite takes a minute or two on a CPU)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.last = time.monotonic()

    def done(self, part: str) -> None:
        now = time.monotonic()
        self.seconds[part] = round(now - self.last, 2)
        self.last = now
        log.info("probes: %s done in %.1f s", part, self.seconds[part])


def _tradeoffs(model: Any, cfg: Any, dims: list[str], previous: Any, out_dir: Path) -> dict[str, Any] | None:
    """The trade-off scenarios, each choice read against the version before's."""
    pc = cfg.probes
    scenarios = probes.load_tradeoffs(cfg.path(pc.tradeoffs), dims) if pc.tradeoffs else []
    trade = probes.tradeoff_results(model, scenarios) if scenarios else pd.DataFrame()
    if not len(trade):
        return None
    before = probes.tradeoff_results(previous, scenarios) if previous is not None else None
    trade["choice_before"] = None if before is None else list(before["choice"])
    trade.to_parquet(out_dir / TRADEOFFS, index=False)
    return {
        "scenarios": len(trade),
        "as_expected": int(trade["as_expected"].sum()),
        "dimensions_as_expected": int(trade["dimensions_as_expected"].sum()),
        "missed": list(trade.loc[~trade["as_expected"], "id"]),
        "flipped": probes.flipped(trade, before),
        "regressions": probes.regressions(trade, before),
        "per_trade": {
            t: {"scenarios": int(len(g)), "as_expected": int(g["as_expected"].sum())}
            for t, g in trade.groupby("trade")
        },
    }


def _adversarial(model: Any, cfg: Any, dims: list[str], seed: int, out_dir: Path) -> dict[str, Any] | None:
    """Adversarial consistency on a sample of the contrast fixtures: how often a meaning-preserving rewrite flips
    the order of a pair."""
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures

    pc = cfg.probes
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), dims) if cfg.fixtures.file and pc.adversarial_pairs else []
    if not fixtures:
        return None
    chosen = [fixtures[i] for i in _sample(len(fixtures), pc.adversarial_pairs, seed)]
    adv = probes.adversarial(
        model, [f.prompt for f in chosen], [f.better for f in chosen], [f.worse for f in chosen], seed
    )
    examples = [json.dumps(e) if e else None for e in adv["example"]]
    adv.assign(example=examples).to_parquet(out_dir / ADVERSARIAL, index=False)
    measured = adv.dropna(subset=["flip_rate"])
    worst = measured.sort_values("flip_rate", ascending=False).iloc[0] if len(measured) else None
    return {
        "pairs": len(chosen),
        "per": {
            r.perturbation: {
                "pairs": int(r.pairs),
                "flip_rate": r.flip_rate,
                "mean_shift": r.mean_shift,
                "max_shift": r.max_shift,
            }
            for r in adv.itertuples()
        },
        "worst": None if worst is None else worst["perturbation"],
        "max_flip_rate": None if worst is None else float(worst["flip_rate"]),
    }


def _counterfactuals(model: Any, items: list[Any], out_dir: Path) -> dict[str, Any] | None:
    """Each counterfactual query: does its change move its dimension the right way, and most of all?"""
    if not items:
        return None
    cf = probes.counterfactual_results(model, items)
    cf.to_parquet(out_dir / COUNTERFACTUALS, index=False)
    return {
        "queries": len(cf),
        "right_way": int(cf["right_way"].sum()),
        "largest": int(cf["largest"].sum()),
        "missed": list(cf.loc[~cf["right_way"], "id"]),
        "per_change": {
            c: {
                "queries": int(len(g)),
                "right_way": int(g["right_way"].sum()),
                "largest": int(g["largest"].sum()),
                "dimension": g["dimension"].iloc[0],
            }
            for c, g in cf.groupby("change")
        },
    }


def _attribution(model: Any, cfg: Any, items: list[Any], seed: int, out_dir: Path) -> dict[str, Any] | None:
    """Occlusion over a sample of the counterfactuals' changed replies (where the change should show)."""
    pc, dims = cfg.probes, list(model.dimensions)
    explained = [items[i] for i in _sample(len(items), pc.attribution_examples, seed)] if items else []
    if not explained:
        return None
    tables, pages = [], []
    for c in explained:
        table = probes.occlusion(model, c.prompt, c.changed, pc.attribution_words)
        tables.append(table.assign(id=c.id, prompt=c.prompt, reply=c.changed))
        way = "up" if c.direction > 0 else "down"
        title = f"{c.id}: {c.change} ({c.dimension} should move {way})"
        pages.append(probes.attribution_html(c.prompt, c.changed, table, dims, title))
    pd.concat(tables, ignore_index=True).to_parquet(out_dir / ATTRIBUTION_TABLE, index=False)
    (out_dir / ATTRIBUTION).write_text(_join_pages(pages), encoding="utf-8")
    return {"examples": [c.id for c in explained], "words": pc.attribution_words, "method": "occlusion"}


def _map(model: Any, rows: pd.DataFrame, label: str, out_dir: Path) -> dict[str, Any]:
    """The day's replies (and people's pairs) on the first two principal components of their reward vectors,
    and the dimensions' correlations."""
    dims = list(model.dimensions)
    vectors = np.asarray(model.raw_scores(list(rows["prompt"]), list(rows["response"]))["vector"], dtype=np.float64)
    coords, var = probes.pca(vectors)
    frame = rows.assign(
        pc1=coords[:, 0],
        pc2=coords[:, 1] if coords.shape[1] > 1 else 0.0,
        **{f"v_{d}": vectors[:, j] for j, d in enumerate(dims)},
    )
    frame.to_parquet(out_dir / MAP, index=False)
    corr = probes.correlations(vectors, dims)
    corr.reset_index(names="dimension").to_parquet(out_dir / CORRELATIONS, index=False)
    chosen = [None if c is None or pd.isna(c) else bool(c) for c in rows["chosen"]]
    title = f"reward vectors of {len(rows)} replies: {label}"
    probes.plot_manifold_map(coords, var, list(rows["category"]), out_dir / MAP_PLOT, title, chosen)
    pairs = [
        (dims[i], dims[j], float(corr.iloc[i, j]))
        for i in range(len(dims))
        for j in range(i + 1, len(dims))
        if np.isfinite(corr.iloc[i, j])
    ]
    strongest = sorted(pairs, key=lambda t: -abs(t[2]))[:3]
    return {
        "replies": len(rows),
        "people_replies": int(rows["chosen"].notna().sum()),
        "explained": [float(v) for v in var],
        "strongest_correlations": [{"a": a, "b": b, "r": r} for a, b, r in strongest],
    }


def _collisions(model: Any, cfg: Any, rows: pd.DataFrame) -> dict[str, Any] | None:
    """The dimensions' gradient agreement on a few replies (not people's): which dimensions pull together."""
    from hominem_pipeline.core.evaluation.health import dcs_of, gradient_agreement

    pc, dims = cfg.probes, list(model.dimensions)
    grad_rows = rows[rows["chosen"].isna()].head(pc.collision_replies) if pc.collision_replies else rows.iloc[:0]
    if len(grad_rows) < 2:
        return None
    gda = gradient_agreement(model, list(grad_rows["prompt"]), list(grad_rows["response"]), cfg.health.dcs_layers)
    return {
        "replies": len(grad_rows),
        "dcs": dcs_of(gda),
        "pairs": probes.collisions(gda, dims),
        "agreement": {d: dict(zip(dims, map(float, gda[i]))) for i, d in enumerate(dims)},
    }


def run_suite(
    model: Any,
    cfg: Any,
    seed: int,
    out_dir: Path,
    *,
    previous: Any = None,
    replies: pd.DataFrame | None = None,
    people: pd.DataFrame | None = None,
    label: str = "",
    previous_label: str | None = None,
) -> dict[str, Any]:
    """Run every probe of `cfg.probes` on `model` (a reward model) and write the results to `out_dir`.

    Args:
        model: the reward model probed.
        cfg: the project's settings (`probes`, `fixtures`, `health.dcs_layers`).
        seed: draws the samples of fixtures, counterfactuals and replies.
        out_dir: where every table, page and plot goes.
        previous: the version before, whose trade-off choices a flip is read against.
        replies: (prompt, response, category) for the manifold map and the collisions.
        people: (prompt, chosen, rejected) of people's pairs, marked on the map.
        label: this version's name, shown in the summary and the plots.
        previous_label: the version before's.

    Returns the summary (also `probes.json`).
    """
    dims = list(model.dimensions)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"reward_model": label, "previous": previous_label, "dimensions": dims}
    clock, pc = _Clock(), cfg.probes

    def add(part: str, found: dict[str, Any] | None) -> None:
        if found is not None:
            summary[part] = found

    add("tradeoffs", _tradeoffs(model, cfg, dims, previous, out_dir))
    clock.done("tradeoffs")
    add("adversarial", _adversarial(model, cfg, dims, seed, out_dir))
    clock.done("adversarial")
    items = probes.load_counterfactuals(cfg.path(pc.counterfactuals), dims) if pc.counterfactuals else []
    add("counterfactuals", _counterfactuals(model, items, out_dir))
    clock.done("counterfactuals")
    add("attribution", _attribution(model, cfg, items, seed, out_dir))
    clock.done("attribution")
    rows = _map_rows(replies, people, pc.map_replies, seed)
    if len(rows) >= 2:
        summary["map"] = _map(model, rows, label, out_dir)
        clock.done("map")
        found = _collisions(model, cfg, rows)
        if found is not None:
            summary["collisions"] = found
            clock.done("collisions")
    plot_suite(summary, out_dir / SUITE_PLOT)
    summary["seconds"] = clock.seconds
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=float) + "\n")
    return summary


def _join_pages(pages: list[str]) -> str:
    """One page holding each example's body."""
    bodies = [p.split("<body>", 1)[1].rsplit("</body>", 1)[0] for p in pages]
    head = pages[0].split("<body>", 1)[0]
    return head + "<body>" + "<hr>".join(bodies) + "</body></html>"


def _map_rows(replies: pd.DataFrame | None, people: pd.DataFrame | None, k: int, seed: int) -> pd.DataFrame:
    """(prompt, response, category, chosen): a sample of `k` replies (chosen None) and both replies of people's
    pairs."""
    parts = []
    if replies is not None and len(replies) and k:
        pick = replies.iloc[_sample(len(replies), k, seed)]
        parts.append(
            pd.DataFrame(
                {
                    "prompt": pick["prompt"].to_numpy(),
                    "response": pick["response"].to_numpy(),
                    "category": pick["category"].astype(str).to_numpy(),
                    "chosen": [None] * len(pick),
                }
            )
        )
    if people is not None and len(people):
        for side, flag in (("chosen", True), ("rejected", False)):
            parts.append(
                pd.DataFrame(
                    {
                        "prompt": people["prompt"].to_numpy(),
                        "response": people[side].to_numpy(),
                        "category": "people's pairs",
                        "chosen": [flag] * len(people),
                    }
                )
            )
    rows = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=["prompt", "response", "category", "chosen"])
    )
    rows = rows[rows["response"].fillna("").str.strip() != ""].reset_index(drop=True)
    return rows.astype({"chosen": object})


def metrics(summary: dict[str, Any]) -> dict[str, float | None]:
    """The summary as flat metrics (MLflow, Dagster): shares in 0-1, counts as numbers."""
    out: dict[str, float | None] = {}
    if t := summary.get("tradeoffs"):
        out.update(
            probe_tradeoffs_as_expected=t["as_expected"] / t["scenarios"],
            probe_tradeoff_regressions=float(len(t["regressions"])),
            probe_tradeoff_flips=float(len(t["flipped"])),
        )
    if a := summary.get("adversarial"):
        shifts = [p["mean_shift"] for p in a["per"].values() if p["mean_shift"] is not None]
        out.update(
            probe_adversarial_max_flip_rate=a["max_flip_rate"],
            probe_adversarial_mean_shift=float(np.mean(shifts)) if shifts else None,
        )
        for name, p in a["per"].items():
            out[f"probe_flip_rate_{name}"] = p["flip_rate"]
    if c := summary.get("counterfactuals"):
        out.update(
            probe_counterfactual_right_way=c["right_way"] / c["queries"],
            probe_counterfactual_largest=c["largest"] / c["queries"],
        )
    if m := summary.get("map"):
        out["probe_pc1_explained"] = m["explained"][0]
    if k := summary.get("collisions"):
        out.update(probe_collisions=float(len(k["pairs"])), probe_dcs=k["dcs"])
    return out


def verdict(summary: dict[str, Any], max_flip_rate: float) -> tuple[bool, str]:
    """(passed, description) of the `probe_consistency` check: no trade-off the version before chose as
    written flips, and no perturbation flips more than `max_flip_rate` of the pairs."""
    problems = []
    if t := summary.get("tradeoffs"):
        if t["regressions"]:
            problems.append(
                f"trade-off regression against {summary.get('previous')}: {', '.join(t['regressions'])} "
                "no longer chosen as written"
            )
    if a := summary.get("adversarial"):
        high = {
            n: p["flip_rate"]
            for n, p in a["per"].items()
            if p["flip_rate"] is not None and p["flip_rate"] > max_flip_rate
        }
        if high:
            problems.append(
                "perturbations flip more than probes.max_flip_rate "
                f"{max_flip_rate:.0%} of pairs: "
                + ", ".join(f"{n} {v:.0%}" for n, v in sorted(high.items(), key=lambda kv: -kv[1]))
            )
    if problems:
        return False, "; ".join(problems)
    parts = []
    if t:
        parts.append(
            f"trade-offs {t['as_expected']}/{t['scenarios']} as written"
            + (f", none regressed against {summary['previous']}" if summary.get("previous") else "")
        )
    if a:
        parts.append(f"worst perturbation {a['worst']} flips {a['max_flip_rate']:.0%} of {a['pairs']} pairs")
    return True, "; ".join(parts) or "no probe configured"


def plot_suite(summary: dict[str, Any], path: Path) -> Path | None:
    """Three panels: each perturbation's flip rate and mean shift, each counterfactual change's share moved
    the right way, and each trade's share chosen as written."""
    panels = [k for k in ("adversarial", "counterfactuals", "tradeoffs") if summary.get(k)]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, name in zip(axes[0], panels):
        if name == "adversarial":
            per = {k: v for k, v in summary["adversarial"]["per"].items() if v["flip_rate"] is not None}
            ax.bar(list(per), [v["flip_rate"] for v in per.values()], color="#e8590c", label="flip rate")
            ax.plot(list(per), [v["mean_shift"] for v in per.values()], "ko-", label="mean |shift| of the scalar")
            ax.set_title(f"adversarial ({summary['adversarial']['pairs']} contrast pairs)", fontsize=9)
        elif name == "counterfactuals":
            per = summary["counterfactuals"]["per_change"]
            ax.bar(
                list(per),
                [v["right_way"] / v["queries"] for v in per.values()],
                color="#1c7ed6",
                label="moved the right way",
            )
            ax.bar(
                list(per),
                [v["largest"] / v["queries"] for v in per.values()],
                color="#74c0fc",
                width=0.4,
                label="... and most",
            )
            ax.set_ylim(0, 1)
            ax.set_title("counterfactuals: the named dimension", fontsize=9)
        else:
            per = summary["tradeoffs"]["per_trade"]
            ax.bar(
                list(per),
                [v["as_expected"] / v["scenarios"] for v in per.values()],
                color="#2f9e44",
                label="chosen as written",
            )
            ax.set_ylim(0, 1)
            ax.set_title("trade-offs", fontsize=9)
        ax.tick_params(axis="x", rotation=30, labelsize=7)
        ax.legend(fontsize=7)
    fig.suptitle(f"probing suite: {summary.get('reward_model', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
