"""Contrast fixtures: hand-written pairs of replies to one message where any attentive person agrees
which is better, each tagged with the quality it tests (`config/fixtures/contrast.yaml`).

They are a yardstick, never training data: a reward model is scored on them (`fixture_report`: the
share of pairs whose better reply it scores higher, overall and per tag, with the pairs it got wrong),
and so is each adapter (`adapter_moves`: did training move the student toward the better replies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hominem_pipeline.core.common.tags import EXTRA_TAGS, own_dimension

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

FIXTURES_JSON = "fixtures.json"  # a reward model's fixture report, beside its METADATA


@dataclass(frozen=True)
class Fixture:
    tag: str
    prompt: str
    better: str
    worse: str


def load_fixtures(path: str | Path, dimensions: Sequence[str]) -> list[Fixture]:
    """The fixtures in `path` (a YAML list of {tag, prompt, better, worse}); a malformed entry raises
    ValueError naming the file, the entry and what to write instead."""
    import yaml

    path = Path(path)
    try:
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"fixture file {path} does not exist; set fixtures.file to a YAML list of pairs, or to null for none"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path} is not readable YAML ({exc}); it holds a list of {{tag, prompt, better, worse}} entries"
        ) from None
    if not isinstance(rows, list) or not rows:
        raise ValueError(
            f"{path} holds {type(rows).__name__}, not a list of fixtures; write one '- tag: ...' entry per pair"
        )
    tags = set(dimensions) | set(EXTRA_TAGS)
    out = []
    for i, row in enumerate(rows, 1):
        where = f"{path}, entry {i}"
        if not isinstance(row, dict):
            raise ValueError(f"{where} is {type(row).__name__}, not a mapping with tag, prompt, better and worse")
        missing = [
            k for k in ("tag", "prompt", "better", "worse") if not isinstance(row.get(k), str) or not row[k].strip()
        ]
        unknown = sorted(set(row) - {"tag", "prompt", "better", "worse"})
        if missing or unknown:
            raise ValueError(
                f"{where}: "
                + "; ".join(
                    ([f"needs non-empty text for {', '.join(missing)}"] if missing else [])
                    + ([f"unknown keys {unknown}"] if unknown else [])
                )
            )
        if row["tag"] not in tags:
            raise ValueError(
                f"{where}: unknown tag {row['tag']!r}; use a dimension ({', '.join(dimensions)}) or one "
                f"of {', '.join(EXTRA_TAGS)}"
            )
        if row["better"].strip() == row["worse"].strip():
            raise ValueError(f"{where}: the better and the worse reply are the same text")
        out.append(Fixture(row["tag"], row["prompt"].strip(), row["better"].strip(), row["worse"].strip()))
    return out


@dataclass
class FixtureReport:
    """How often a scorer prefers the better reply: overall, per tag, and the pairs it got wrong. A
    reward model's report also holds `dimensions`: the same figures for each tag's own dimension
    (`tags.own_dimension`) on that tag's fixtures, where the scorer is that one dimension of the vector."""

    accuracy: float
    by_tag: dict[str, float]
    counts: dict[str, int]
    failures: list[dict[str, Any]] = field(default_factory=list)
    dimensions: FixtureReport | None = None
    dimension_of: dict[str, str] = field(default_factory=dict)  # tag -> the dimension that scored it (in `dimensions`)

    @property
    def pairs(self) -> int:
        return sum(self.counts.values())

    def worst_tag(self) -> tuple[str, float]:
        tag = min(self.by_tag, key=lambda t: (self.by_tag[t], t))
        return tag, self.by_tag[tag]

    def metrics(self) -> dict[str, float]:
        """Flat figures for MLflow: fixture_accuracy and fixture_accuracy_<tag>; with dimensions, also
        fixture_dimension_accuracy and fixture_dimension_accuracy_<tag>."""
        out = {"fixture_accuracy": self.accuracy, **{f"fixture_accuracy_{t}": v for t, v in self.by_tag.items()}}
        if self.dimensions is not None:
            out.update(
                {
                    "fixture_dimension_accuracy": self.dimensions.accuracy,
                    **{f"fixture_dimension_accuracy_{t}": v for t, v in self.dimensions.by_tag.items()},
                }
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy,
            "pairs": self.pairs,
            "by_tag": self.by_tag,
            "counts": self.counts,
            "failures": self.failures,
            **(
                {"dimensions": self.dimensions.as_dict(), "dimension_of": self.dimension_of}
                if self.dimensions is not None
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FixtureReport:
        nested = d.get("dimensions")
        return cls(
            d["accuracy"],
            d["by_tag"],
            d["counts"],
            d["failures"],
            None if nested is None else cls.from_dict(nested),
            d.get("dimension_of", {}),
        )


def fixture_report(
    fixtures: Sequence[Fixture],
    gaps: Sequence[float],
    vector_gaps: np.ndarray | None = None,
    dimensions: Sequence[str] | None = None,
) -> FixtureReport:
    """`gaps`: per fixture, the better reply's score minus the worse one's (a tie counts as wrong).
    `vector_gaps` (n, len(dimensions)): the same per dimension; each fixture whose tag has an own
    dimension is then also scored by that dimension alone (the report's `dimensions`)."""
    gaps = np.asarray(gaps, dtype=np.float64)
    if len(gaps) != len(fixtures):
        raise ValueError(f"fixture_report takes one gap per fixture: got {len(gaps)} for {len(fixtures)}")
    right = gaps > 0
    tags = sorted({f.tag for f in fixtures})
    by_tag = {t: float(np.mean([r for f, r in zip(fixtures, right) if f.tag == t])) for t in tags}
    counts = {t: sum(f.tag == t for f in fixtures) for t in tags}
    failures = [
        {"tag": f.tag, "prompt": f.prompt, "better": f.better, "worse": f.worse, "gap": round(float(g), 4)}
        for f, g, r in zip(fixtures, gaps, right)
        if not r
    ]
    report = FixtureReport(float(right.mean()), by_tag, counts, sorted(failures, key=lambda x: x["gap"]))
    if vector_gaps is not None and dimensions is not None:
        own = [(i, own_dimension(f.tag, dimensions)) for i, f in enumerate(fixtures)]
        own = [(i, d) for i, d in own if d is not None]
        if own:
            report.dimensions = fixture_report(
                [fixtures[i] for i, _ in own], [vector_gaps[i, list(dimensions).index(d)] for i, d in own]
            )
            report.dimension_of = {fixtures[i].tag: d for i, d in own}
            for x in report.dimensions.failures:
                x["dimension"] = report.dimension_of[x["tag"]]
    return report


def score_fixtures(reward_model: RewardModel, fixtures: Sequence[Fixture], batch_size: int = 32) -> FixtureReport:
    """The report of a `RewardModel` on `fixtures`: its scalar, and each tag's own dimension of its vector."""
    prompts = [f.prompt for f in fixtures]
    raw = reward_model.raw_scores(
        prompts + prompts, [f.better for f in fixtures] + [f.worse for f in fixtures], batch_size=batch_size
    )
    n = len(fixtures)
    scalar, vector = raw["scalar"].astype(np.float64), raw["vector"].astype(np.float64)  # exact gaps of float32 scores
    return fixture_report(fixtures, scalar[:n] - scalar[n:], vector[:n] - vector[n:], reward_model.dimensions)


def fixtures_file_digest(cfg: Any) -> str | None:
    """The content digest of `fixtures.file` (part of the versions of the stages scored on it)."""
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    return optional_file_digest(None if cfg.fixtures.file is None else cfg.path(cfg.fixtures.file))


FIXTURE_MAX_LENGTH = 256  # tokens of prompt + reply in the student's chat template (`policy.sequences.encode`)


def base_logp_cache(student: Path, folder: Path, shipped: Path | None = None) -> Any:
    """The feature cache (`reward.feature_cache`) of the base student's (summed log-probability, token
    count) of fixture replies, in `folder`, with the project's shipped rows (`shipped`): the base never
    changes, so each day's evaluation reads them instead of a pass of the student over every fixture."""
    from hominem_pipeline.core.pipeline.artifacts import folder_digest
    from hominem_pipeline.core.reward.feature_cache import FeatureCache

    return FeatureCache(
        folder, ["student reply logps", folder_digest(student), FIXTURE_MAX_LENGTH], 2, shipped=shipped
    )


def adapter_moves(
    model: Any, tokenizer: Any, fixtures: Sequence[Fixture], batch_size: int, base_cache: Any = None
) -> tuple[FixtureReport, dict[str, float]]:
    """Did training move the student toward the better replies? Per fixture, the adapter's implicit
    reward (`people_pairs.implicit_reward`: its margin log P(better) - log P(worse) minus the base's):
    positive where the adapter moved the right way. The report's accuracy is the share of fixtures moved
    the right way (per tag, the pairs moved the wrong way listed); also the mean move in nats and the
    share of fixtures whose better reply each side finds the more likely per token. `base_cache`:
    `base_logp_cache` of the model's base."""
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward

    summary, moves = implicit_reward(
        model,
        tokenizer,
        [f.prompt for f in fixtures],
        [f.better for f in fixtures],
        [f.worse for f in fixtures],
        batch_size,
        FIXTURE_MAX_LENGTH,
        base_cache,
    )
    return fixture_report(fixtures, moves), {
        "fixture_mean_move": summary.mean_margin,
        "fixture_base_prefers_better": summary.base_prefers_chosen,
        "fixture_adapter_prefers_better": summary.adapter_prefers_chosen,
    }


def specificity(gaps: np.ndarray, named: Sequence[int], direction: Sequence[float] | None = None) -> dict[str, float]:
    """Does each dimension mean itself? Per item, how far the named dimension moves the named way beyond the
    mean move of the others: `direction_i * (gaps[i, named_i] - mean_{k != named_i} gaps[i, k])`, for `gaps`
    (n, D) the vector's change per item (a tagged fixture's better minus worse reply, a counterfactual's changed
    minus its reply) and `direction` +1 (up) or -1 (down), +1 by default. Returns the mean, its standard error,
    the items, and the share where the named dimension moved beyond the others."""
    gaps = np.asarray(gaps, dtype=np.float64)
    named = np.asarray(named, dtype=np.int64)
    sign = np.ones(len(gaps)) if direction is None else np.asarray(direction, dtype=np.float64)
    if len(gaps) == 0:
        return {"items": 0, "mean": float("nan"), "se": float("nan"), "beyond": float("nan")}
    own = gaps[np.arange(len(gaps)), named]
    others = (gaps.sum(1) - own) / max(gaps.shape[1] - 1, 1)
    excess = sign * (own - others)
    se = float(excess.std(ddof=1) / np.sqrt(len(excess))) if len(excess) > 1 else float("nan")
    return {"items": len(excess), "mean": float(excess.mean()), "se": se, "beyond": float((excess > 0).mean())}
