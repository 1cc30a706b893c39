"""Preference pairs from labeled candidates: (prompt, chosen, rejected) by a strategy (every pair above a
margin, best against worst, or per dimension guarded by harm avoidance) on a weighted aggregate."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.schema import PreferencePair, vector_matrix
from hominem_pipeline.core.pipeline.artifacts import fingerprint

PAIR_COLUMNS = list(PreferencePair.model_fields)


def weighted_aggregate(vectors: Sequence[Mapping[str, float]], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted mean of each reward vector: sum_d w_d * v_d / sum_d w_d, in [-1, 1]."""
    names = list(weights)
    w = np.array([weights[d] for d in names], dtype=np.float64)
    return vector_matrix(vectors, names) @ w / w.sum()


STRATEGIES = ("margin", "best_vs_worst", "per_dimension")


@dataclass(frozen=True)
class PairRules:
    """How pairs are drawn from one prompt's candidates.

    Args:
        weights: each dimension's weight in the aggregate the candidates are ranked by.
        min_margin: pairs whose ranking gap is below it are near-ties, dropped.
        max_pairs_per_prompt: the largest gaps first, at most this many per prompt.
        strategy: margin (every pair above the margin), best_vs_worst, or per_dimension (pairs where the chosen
            reply wins on one dimension without losing on `guard`, each once, on the dimension it wins most).
        guard: the dimension a per_dimension pair may not lose on (None, or a dimension not weighted: none).
        min_scalar_margin: None: off; else a pair is also dropped unless the ranking judge's overall score (the
            teacher's `scalar` label, or the reward model's scalar head) prefers the chosen reply by at least
            this much.
    """

    weights: Mapping[str, float]
    min_margin: float
    max_pairs_per_prompt: int
    strategy: str = "margin"
    guard: str | None = "harm_avoidance"
    min_scalar_margin: float | None = None

    def kept(self, gap: float, hi: Mapping, lo: Mapping) -> bool:
        """Whether a (chosen `hi`, rejected `lo`) pair whose ranking gap is `gap` is no near-tie: the gap is at
        least `min_margin` (and positive), the replies differ, and, with `min_scalar_margin` set, the ranking
        judge's overall score (`_scalar`) prefers `hi` by at least that much too (a NaN score never does)."""
        if not (gap >= self.min_margin and gap > 0 and hi["response"] != lo["response"]):
            return False
        if self.min_scalar_margin is None:
            return True
        overall = float(hi["_scalar"] - lo["_scalar"])
        return overall >= self.min_scalar_margin and overall > 0


def _candidates(
    records: list[dict], rules: PairRules, guard: str | None
) -> list[tuple[float, dict, dict, str | None]]:
    """(margin, chosen, rejected, dimension) for one prompt's answered candidates by `rules.strategy`, near-ties
    dropped (`PairRules.kept`), largest margin first."""
    strategy, dims = rules.strategy, list(rules.weights)
    found: list[tuple[float, dict, dict, str | None]] = []
    if strategy == "best_vs_worst":
        if len(records) >= 2:
            ranked = sorted(records, key=lambda r: (-r["_agg"], r["trajectory_id"]))
            hi, lo = ranked[0], ranked[-1]
            found.append((float(hi["_agg"] - lo["_agg"]), hi, lo, None))
    elif strategy == "margin":
        for x, y in itertools.combinations(records, 2):
            hi, lo = (x, y) if x["_agg"] >= y["_agg"] else (y, x)
            found.append((float(hi["_agg"] - lo["_agg"]), hi, lo, None))
    else:  # per_dimension: each ordered pair, on the dimension the first wins most
        for hi, lo in itertools.permutations(records, 2):
            if guard is not None and hi["vector"][guard] < lo["vector"][guard]:
                continue  # never prefer a reply that is less careful about harm
            gap, dim = max((hi["vector"][d] - lo["vector"][d], d) for d in dims)
            found.append((float(gap), hi, lo, dim))
    found = [c for c in found if rules.kept(c[0], c[1], c[2])]
    found.sort(key=lambda c: (-c[0], c[1]["trajectory_id"], c[2]["trajectory_id"]))
    return found


RANKERS = ("teacher", "reward_model")


def _ranked(
    labeled: pd.DataFrame, rules: PairRules, rank_by: str, rm_scalar: Any, rm_vectors: Any, student: Any
) -> pd.DataFrame:
    """The candidates with what they are ranked by: the aggregate (`_agg`), the teacher's (`_teacher`), the
    reward model's scalar (`_rm`) and the ranking judge's overall score (`_scalar`); the vector the reward
    model's under rank_by reward_model. Bad combinations raise ValueError saying what is missing."""
    teacher = agg = weighted_aggregate(list(labeled["vector"]), rules.weights)
    if rank_by == "reward_model":
        if rm_vectors is None or len(rm_vectors) != len(labeled):
            raise ValueError(
                "rank_by='reward_model' needs the reward model's vector for every labeled row (rm_vectors)"
            )
        labeled = labeled.assign(vector=list(rm_vectors))  # per_dimension pairs and the guard read it too
        agg = weighted_aggregate(rm_vectors, rules.weights)
        if rules.min_scalar_margin is not None and rm_scalar is None:
            raise ValueError(
                "min_scalar_margin with rank_by='reward_model' needs the reward model's scalar for every "
                "labeled row (rm_scalar)"
            )
    elif student is not None:
        raise ValueError(
            "pairs against the student's replies need rank_by='reward_model': the student's replies "
            "carry no teacher label"
        )
    rm = np.asarray(rm_scalar, dtype=np.float64) if rm_scalar is not None else np.full(len(labeled), np.nan)
    overall = rm if rank_by == "reward_model" else _teacher_scalar(labeled, rules.min_scalar_margin)
    return labeled.assign(_agg=agg, _teacher=teacher, _rm=rm, _scalar=overall)


def _pair_row(margin: float, hi: dict, lo: dict, dim: str | None, rank_by: str, source: str) -> dict[str, Any]:
    return PreferencePair(
        pair_id=fingerprint([hi["trajectory_id"], lo["trajectory_id"]], 12),
        prompt_id=hi["prompt_id"],
        prompt=hi["prompt"],
        category=hi["category"],
        chosen=hi["response"],
        rejected=lo["response"],
        chosen_trajectory_id=hi["trajectory_id"],
        rejected_trajectory_id=lo["trajectory_id"],
        margin=margin,
        chosen_reward_intensity=float(hi["reward_intensity"]),
        chosen_safety_score=float(hi["safety_score"]),
        rm_margin=float(hi["_rm"] - lo["_rm"]),
        teacher_margin=float(hi["_teacher"] - lo["_teacher"]) if "_teacher" in lo else None,
        ranked_by=rank_by,
        source=lo.get("_source", source),
        dimension=dim,
        chosen_finished=_finished(hi),
        rejected_finished=_finished(lo),
    ).model_dump()


def build_preference_pairs(
    labeled: pd.DataFrame,
    rules: PairRules,
    *,
    rm_scalar: Sequence[float] | None = None,
    rm_vectors: Sequence[Mapping[str, float]] | None = None,
    rank_by: str = "teacher",
    source: str = "teacher",
    student: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Same-prompt pairs by `rules` (`PairRules`), the largest gaps first.

    Args:
        labeled: one row per candidate with columns trajectory_id, prompt_id, prompt, category, response, vector,
            reward_intensity, safety_score and, optionally, finished (False: the generation was cut at its token
            budget; the pair carries it so that training does not teach the reply to end there).
        rules: how pairs are drawn and which are dropped.
        rm_scalar: the reward model's scalar per row (each pair's `rm_margin`).
        rm_vectors: the reward model's vector per row.
        rank_by: "teacher" ranks the candidates by the teacher's vectors; "reward_model" by `rm_vectors` (the
            policy then learns what the reward model that judges it prefers, among the same candidates). Either
            way each pair carries `teacher_margin` (the teacher's aggregate gap) and `rm_margin`; its `margin` is
            the gap it was ranked by (per-dimension pairs: the gap on the `dimension` they name).
        source: each pair's `source` (the student's pairs are `student`).
        student: (rank_by reward_model only) the student's own reply to each prompt, as the evaluation decodes it
            (prompt_id, response, finished, scalar, vector: the reward model's). Each prompt then also gets one
            pair, its best candidate against that reply, when the reward model prefers the candidate by at least
            `min_margin` (beyond `max_pairs_per_prompt`): the adapter learns to beat the base's default reply.
    """
    if rules.strategy not in STRATEGIES:
        raise ValueError(f"pairing strategy {rules.strategy!r} is not one of {', '.join(STRATEGIES)}")
    if rank_by not in RANKERS:
        raise ValueError(f"preferences.rank_by {rank_by!r} is not one of {', '.join(RANKERS)}")
    if labeled.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    ranked = _ranked(labeled, rules, rank_by, rm_scalar, rm_vectors, student)
    guard = rules.guard if rules.guard in rules.weights else None
    own = _student_records(student, rules.weights) if student is not None else {}
    rows = []
    for prompt_id, group in ranked.groupby("prompt_id", sort=True):
        records = group[group["response"].str.strip().astype(bool)].to_dict(orient="records")
        found = _candidates(records, rules, guard)[: rules.max_pairs_per_prompt]
        if records and prompt_id in own:
            best = min(records, key=lambda r: (-r["_agg"], r["trajectory_id"]))
            mine = own[prompt_id]
            gap = float(best["_agg"] - mine["_agg"])
            if rules.kept(gap, best, mine):
                found.append((gap, best, mine, None))
        rows += [_pair_row(margin, hi, lo, dim, rank_by, source) for margin, hi, lo, dim in found]
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def _teacher_scalar(labeled: pd.DataFrame, min_scalar_margin: float | None) -> np.ndarray:
    """The teacher's overall score per row (NaN where absent): what `min_scalar_margin` reads under rank_by teacher."""
    if "scalar" in labeled.columns:
        return pd.to_numeric(labeled["scalar"], errors="coerce").to_numpy(dtype=np.float64)
    if min_scalar_margin is not None:
        raise ValueError(
            "min_scalar_margin with rank_by='teacher' needs the teacher's overall score: the labels "
            "have no 'scalar' column"
        )
    return np.full(len(labeled), np.nan)


def _student_records(student: pd.DataFrame, weights: Mapping[str, float]) -> dict[str, dict]:
    """The student's scored replies as pair records, keyed by prompt id (unanswered ones dropped)."""
    missing = {"prompt_id", "response", "finished", "scalar", "vector"} - set(student.columns)
    if missing:
        raise ValueError(f"the student's replies lack column(s) {sorted(missing)}")
    student = student[student["response"].str.strip().astype(bool)]
    agg = weighted_aggregate(list(student["vector"]), weights) if len(student) else []
    return {
        row["prompt_id"]: {
            "trajectory_id": "student-" + fingerprint([row["prompt_id"], row["response"]], 12),
            "response": row["response"],
            "finished": row["finished"],
            "_agg": float(a),
            "_rm": float(row["scalar"]),
            "_scalar": float(row["scalar"]),  # the reward model ranks pairs against the student
            "_source": "student",
        }
        for row, a in zip(student.to_dict(orient="records"), agg)
    }


def _finished(record: Mapping) -> bool:
    value = record.get("finished", True)
    return True if value is None or (isinstance(value, float) and np.isnan(value)) else bool(value)


class PreferenceFileError(ValueError):
    """A preference table is missing, empty or lacks columns."""


def read_preference_pairs(paths: Sequence, required: Sequence[str] = ("prompt", "chosen", "rejected")) -> pd.DataFrame:
    """Concatenate preference tables (Parquet), failing clearly on a corrupt or empty file."""
    frames = []
    for path in paths:
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise PreferenceFileError(
                f"cannot read preference pairs from {path}: {exc}; re-materialize preference_pairs"
            ) from exc
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise PreferenceFileError(f"{path} lacks columns {missing}; it is not a preference table")
        frames.append(frame)
    pairs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if pairs.empty:
        raise PreferenceFileError(
            f"no preference pairs in {[str(p) for p in paths]}; the candidates were too close to each "
            "other by the scores "
            "that rank them (preferences.rank_by): lower preferences.min_margin or sample more candidates"
        )
    for column in ("chosen_finished", "rejected_finished"):  # tables written before the flags: replies count as ended
        pairs[column] = pairs[column].fillna(True).astype(bool) if column in pairs else True
    return pairs


def sparse_pairs_warning(
    covered: int, prompts: int, rank_by: str, min_margin: float, min_scalar_margin: float | None = None
) -> str | None:
    """A warning when fewer than half of the `prompts` that had answered candidates gave a pair (`covered`
    did): the judge that ranks them separates their candidates by less than `min_margin` (a reward model
    trained on very few labels scores every candidate alike), or, with `min_scalar_margin` set, its
    overall score disagrees with its dimensions. None when coverage is fine or there are no pairs at all
    (that is an error, raised where the pairs are read)."""
    if covered == 0 or covered >= prompts / 2:
        return None
    judge = "reward model" if rank_by == "reward_model" else "teacher"
    cause, fix = f"preferences.min_margin ({min_margin})", "lower it"
    if min_scalar_margin is not None:
        cause += f" with its overall score agreeing by preferences.min_scalar_margin ({min_scalar_margin})"
        fix = "lower either (min_scalar_margin: null turns that check off)"
    return (
        f"only {covered} of {prompts} prompts gave a preference pair: the {judge} separates few of their "
        f"candidates by {cause}; {fix}, or rank by the other judge (preferences.rank_by)"
    )


def people_rows(people: pd.DataFrame | None) -> pd.DataFrame:
    """People's pairs (`builds.reward_model.human_pairs` or `people_pairs`) as the dual trainer's preference
    rows: each chosen reply's intensity its weight (shipped and imported 1, a page choice how strongly it
    was made), its safety 1 (a person chose it), both replies ended."""
    if people is None or not len(people):
        return pd.DataFrame(
            columns=[
                "prompt",
                "chosen",
                "rejected",
                "chosen_reward_intensity",
                "chosen_safety_score",
                "pair_id",
                "source",
            ]
        )
    return pd.DataFrame(
        {
            "prompt": people["prompt"].to_numpy(),
            "chosen": people["chosen"].to_numpy(),
            "rejected": people["rejected"].to_numpy(),
            "chosen_reward_intensity": people["weight"].to_numpy(dtype=float),
            "chosen_safety_score": 1.0,
            "pair_id": people["pair_id"].astype(str).to_numpy(),
            "source": people["source"].astype(str).to_numpy(),
            "chosen_finished": True,
            "rejected_finished": True,
        }
    )
