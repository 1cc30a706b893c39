"""The `reward_model` stage: the multi-head reward model trained on a window of labels and human pairs."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.locks import training
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint
from hominem_pipeline.core.pipeline.stage import CheckOutcome, StageContext, StageOutput
from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

log = logging.getLogger(__name__)


REWARD_MODEL_NAME = "hominem-reward-model"  # in the MLflow model registry; alias `current` = the latest built
HUMAN = ("human_preferences", "human_feedback")  # imported pairs, and the service's feedback


def human_pairs(ctx: StageContext, held_out: bool = True):
    """People's pairs: the shipped ones (`reward_model.people_pairs`), then the window's imported and
    feedback pairs, each with a `weight` (shipped and imported: 1) and `heads` (the heads learn from it,
    not only the people's score: every imported and feedback pair); None when there are none. An
    imported pair that is also shipped (the same prompt and replies) counts once. `held_out` false: without
    the people's held-out pairs, nor an import of one (what the daily adapter, judged on them, learns
    from); true: with them (the reward model: an adapter's figure on them is its implicit reward, which
    never reads the reward model)."""
    import pandas as pd

    every = people_pairs(ctx.cfg, "all")
    shipped = None if every is None else (every if held_out else every[~every["held_out"]]).drop(columns="held_out")
    frames = [] if shipped is None or not len(shipped) else [shipped]
    for asset in HUMAN:
        if ctx.inputs[asset]:
            frame = ctx.tables(asset)
            if asset == "human_preferences" and every is not None:
                frame = frame[~frame["pair_id"].isin(every["pair_id"])]
            if len(frame):
                frames.append(frame.assign(weight=frame["weight"] if "weight" in frame else 1.0, heads=True))
    return pd.concat(frames, ignore_index=True) if frames else None


def nudge_pairs(ctx: StageContext):
    """The window's nudges as pairs about one dimension each (`online.feedback`'s dimension pairs: `tag` the
    dimension, `scalar` false), those on a configured dimension; None when there are none."""
    import pandas as pd

    from hominem_pipeline.core.builds.human_feedback import DIMENSION_PAIRS

    frames = [
        pd.read_parquet(r.file(DIMENSION_PAIRS))
        for r in ctx.inputs["human_feedback"]
        if r.file(DIMENSION_PAIRS).is_file()
    ]
    pairs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not len(pairs):
        return None
    known = pairs["tag"].isin(ctx.cfg.dimension_names)
    if not known.all():
        log.warning(
            "reward model: %d nudge pair(s) on dimensions that are not configured (%s) are not read",
            int((~known).sum()),
            ", ".join(sorted(set(pairs.loc[~known, "tag"]))),
        )
    return pairs[known].assign(heads=True, scalar=False) if known.any() else None


def people_pairs_by_day(ctx: StageContext) -> dict[str, dict[str, int]]:
    """Per day of the window (oldest first), the people's pairs read from it: the service's feedback (`feedback`:
    choices, thumbs and emotion pairs; `nudge`: the nudges' dimension pairs) and the imported ones (`imported`);
    zeros for a day that has none."""
    from hominem_pipeline.core.pipeline.stage import window_days

    days = window_days(ctx.partition, ctx.cfg.reward_model.window_days)
    out = {d: {"feedback": 0, "nudge": 0, "imported": 0} for d in days}
    for r in ctx.inputs["human_feedback"]:
        out.setdefault(r.partition, {"feedback": 0, "nudge": 0, "imported": 0})
        out[r.partition]["feedback"] = int(r.manifest["metadata"].get("rows", 0))
        out[r.partition]["nudge"] = (
            int(r.manifest["metrics"].get("nudge_pairs", 0)) if ctx.cfg.reward_model.dimension_pairs else 0
        )
    for r in ctx.inputs["human_preferences"]:
        out.setdefault(r.partition, {"feedback": 0, "nudge": 0, "imported": 0})
        out[r.partition]["imported"] = int(r.manifest["metadata"].get("rows", 0))
    return dict(sorted(out.items()))


def boosted(pairs, boost: float):
    """People's pairs with each answer to a question the service asked weighing 1 + boost x its expected
    information when asked (`asked_value`, 0-1; `attunement.selection.retrain_boost`); others as given."""
    if pairs is None or not boost or "asked_value" not in pairs:
        return pairs
    value = pairs["asked_value"].astype(float).fillna(0.0).clip(0.0, 1.0)
    return pairs.assign(weight=pairs["weight"].astype(float) * (1.0 + boost * value))


def people_pairs(cfg: HominemConfig, part: str = "train"):
    """The pairs of every `reward_model.people_pairs` file (source `shipped:<name>`, weight 1, `heads`:
    whether the heads learn from it as well as the people's score, `harm`: the file's), in order; None without
    any. `part`: train (every pair but each file's `held_out` last ones), held_out (those alone: the people's held-out
    pairs every adapter is judged on) or all. A file with unusable rows is refused whole, naming them
    (it is part of the project, not an import)."""
    import numpy as np
    import pandas as pd

    from hominem_pipeline.core.human.preferences import parse_preference_file

    if part not in ("train", "held_out", "all"):
        raise ValueError(f"part is {part!r}; pass train, held_out or all")
    frames = []
    for i, spec in enumerate(cfg.reward_model.people_pairs):
        key = f"reward_model.people_pairs[{i}].file"
        path = cfg.path(spec.file)
        if not path.is_file():
            raise FileNotFoundError(f"{key} {path} does not exist; point it at a preference file, or remove the entry")
        parsed = parse_preference_file(path, spec.format, path.name)
        if len(parsed.quarantine) or not len(parsed.pairs):
            first = parsed.quarantine.iloc[0] if len(parsed.quarantine) else None
            unit = "row" if spec.format == "parquet" else "line"
            why = (
                "no pairs"
                if first is None
                else f"{len(parsed.quarantine)} unusable rows ({unit} {first['source_row'] + 1}: {first['reason']})"
            )
            raise ValueError(f"{key} {path} has {why}; mend the file or check its format ({spec.format})")
        n = len(parsed.pairs)
        if spec.held_out >= n:
            raise ValueError(
                f"reward_model.people_pairs[{i}].held_out is {spec.held_out}, but {path} has {n} pairs; "
                "hold out fewer, so some train"
            )
        rows = np.arange(n)
        heads = rows < (n if spec.heads is None else spec.heads)
        held = rows >= n - spec.held_out
        frame = parsed.pairs.assign(
            source=f"shipped:{path.name}", weight=1.0, heads=heads & ~held, held_out=held, harm=spec.harm
        )
        frames.append(
            frame if part == "all" else (frame[held] if part == "held_out" else frame[~held]).drop(columns="held_out")
        )
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    pairs = pd.concat(frames, ignore_index=True)
    return pairs.drop_duplicates("pair_id", ignore_index=True)


def _training_digest(ctx: StageContext) -> str:
    """The content digest of what the model trains on: the sha256 of every table read, as their manifests
    recorded them, of the nudges' pairs, and of the shipped pairs."""
    from hominem_pipeline.core.builds.human_feedback import DIMENSION_PAIRS

    tables = [
        [a, r.partition, r.manifest["files"][r.manifest["table"]]]
        for a in ("teacher_labels", *HUMAN)
        for r in ctx.inputs[a]
    ]
    nudges = [r.manifest["files"].get(DIMENSION_PAIRS) for r in ctx.inputs["human_feedback"]]
    return fingerprint(tables + nudges + [people_pairs_digest(ctx.cfg)], 64)


def _sources(cfg: HominemConfig) -> Any:
    """The backbone, the judge's frame, the guards' student, the people's score's encoder and the caches."""
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import reward_backbone, student_path
    from hominem_pipeline.core.reward.training import RewardSources
    from hominem_pipeline.core.teacher.base import rubric_system

    return RewardSources(
        reward_backbone(cfg),
        judge_system=rubric_system(cfg.labeling),
        judge_question=cfg.labeling.scalar_question,
        guard_student=student_path(cfg) if cfg.reward_model.guards else None,
        people_encoder=people_encoder(cfg),
        feature_cache=cfg.data_dir / FEATURE_CACHE,
        shipped_features=cfg.path(SHIPPED_FEATURES),
        device=resolve_device(cfg.runtime.device),
    )


def build_reward_model(ctx: StageContext) -> StageOutput:
    import pandas as pd

    from hominem_pipeline.core.evaluation.fixtures import FIXTURES_JSON
    from hominem_pipeline.core.reward.metadata import METADATA, RewardMetadata
    from hominem_pipeline.core.reward.training import train_reward_model
    from hominem_pipeline.core.reward.validation import DIMENSION_PLOT, RELIABILITY_PLOT

    labels = ctx.tables("teacher_labels")
    human = boosted(human_pairs(ctx), ctx.cfg.attunement.selection.retrain_boost)
    feedback_pairs = 0 if human is None else int(human["source"].str.startswith("feedback:").sum())
    nudged = nudge_pairs(ctx) if ctx.cfg.reward_model.dimension_pairs else None
    if nudged is not None:
        human = nudged if human is None else pd.concat([human, nudged], ignore_index=True)
    digest = _training_digest(ctx)
    started = time.monotonic()
    with training(ctx.cfg.data_dir, f"the daily run's reward_model {ctx.partition}"):  # never beside an online update
        metrics = train_reward_model(
            labels,
            human,
            sources=_sources(ctx.cfg),
            cfg=ctx.cfg.reward_model,
            dimensions=ctx.cfg.dimension_names,
            out_dir=ctx.out_dir,
            seed=ctx.seed,
            data_digest=digest,
            date=ctx.partition,
            on_epoch=lambda epoch, m: ctx.run.log_metrics(m, step=epoch),
        ).metrics
    metrics["train_seconds"] = time.monotonic() - started
    metrics["feedback_pairs"] = feedback_pairs
    by_day = people_pairs_by_day(ctx)
    RewardMetadata.read(ctx.out_dir).model_copy(update={"people_pairs_by_day": by_day}).write(ctx.out_dir)
    metrics["nudge_pairs"] = 0 if nudged is None else len(nudged)
    report = score_fixture_file(ctx.cfg, ctx.out_dir)
    if report is not None:
        metrics.update(report.metrics())
        log.info(
            "reward model on the contrast fixtures: %.1f%% of %d pairs (weakest tag %s %.0f%%)",
            100 * report.accuracy,
            report.pairs,
            *_pct_tag(report),
        )
    plots = [p for p in (RELIABILITY_PLOT, DIMENSION_PLOT, FIXTURES_JSON) if (ctx.out_dir / p).is_file()]
    return StageOutput(
        metrics={k: v for k, v in metrics.items() if v is None or isinstance(v, (int, float))},
        metadata={
            "rows": len(labels),
            "human_pairs": 0 if human is None else len(human),
            "shipped_pairs": 0 if human is None else int(human["source"].str.startswith("shipped:").sum()),
            "feedback_partitions": [r.partition for r in ctx.inputs["human_feedback"]],
            "people_pairs_by_day": by_day,
            "label_partitions": [r.partition for r in ctx.inputs["teacher_labels"]],
            "human_preference_partitions": [r.partition for r in ctx.inputs["human_preferences"]],
            "training_data_digest": digest,
        },
        mlflow_artifacts=[METADATA, *plots],
    )


def people_encoder(cfg: HominemConfig) -> Path | None:
    """The encoder the people's score reads (`reward_model.people_score.encoder`); None: no people's score."""
    from hominem_pipeline.core.lm.models import ModelNotAvailable, encoder_path

    name = cfg.reward_model.people_score.encoder
    if name is None:
        return None
    if name == "encoder":
        return encoder_path(cfg)
    path = cfg.path(name)
    if not (path / "config.json").is_file():
        raise ModelNotAvailable(
            f"reward_model.people_score.encoder {path} has no config.json; point it at an HF encoder "
            "folder, `encoder` (models.encoder), or null"
        )
    return path


def score_fixture_file(cfg: HominemConfig, folder: Path):
    """The reward model in `folder` scored on the contrast fixtures (`fixtures.file`), the report written
    beside it (fixtures.json); None when no fixture file is configured."""
    import json

    from hominem_pipeline.core.evaluation.fixtures import (
        FIXTURES_JSON,
        fixtures_file_digest,
        load_fixtures,
        score_fixtures,
    )
    from hominem_pipeline.core.reward.model import project_reward_model

    if cfg.fixtures.file is None:
        return None
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    report = score_fixtures(
        project_reward_model(folder, cfg), fixtures
    )  # the fixtures' features come from the cache, not computed every day
    # the file's digest beside its scores: `hominem reward-probe --fixtures` reads them while the file is unchanged
    (folder / FIXTURES_JSON).write_text(
        json.dumps({**report.as_dict(), "fixtures_digest": fixtures_file_digest(cfg)}, indent=1)
    )
    return report


def _pct_tag(report) -> tuple[str, float]:
    tag, value = report.worst_tag()
    return tag, 100 * value


def reward_backbone_digest(cfg: HominemConfig, partition: str) -> dict[str, str | None]:
    """The backbone's files (a local folder's digest; a hub id as named): a model rebuilt on other
    weights under the same path gets another version. And the student that measures the guards, the
    contrast fixtures it is scored on, and the shipped people's pairs it learns from."""
    from hominem_pipeline.core.evaluation.fixtures import fixtures_file_digest
    from hominem_pipeline.core.lm.models import reward_backbone, student_path
    from hominem_pipeline.core.pipeline.artifacts import folder_digest

    source = reward_backbone(cfg)
    return {
        "backbone": folder_digest(source) if Path(source).is_dir() else str(source),
        "fixtures": fixtures_file_digest(cfg),
        "people_pairs": people_pairs_digest(cfg),
        "guard_student": folder_digest(student_path(cfg)) if cfg.reward_model.guards else None,
        "people_encoder": None if (enc := people_encoder(cfg)) is None else folder_digest(enc),
        "people_projection": people_projection_digest(cfg, enc),
    }


def people_projection_digest(cfg: HominemConfig, encoder: Path | None) -> str | None:
    """The digest of the people's score's projection the project ships for `encoder` (None: none shipped;
    the projection is then fitted with the score)."""
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest
    from hominem_pipeline.core.reward.people import EncoderStates

    if encoder is None:
        return None
    return optional_file_digest(
        EncoderStates(encoder, cfg.reward_model.people_score.max_length).projection_file(cfg.path(SHIPPED_FEATURES))
    )


def people_pairs_digest(cfg: HominemConfig) -> list[str | None]:
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    return [optional_file_digest(cfg.path(spec.file)) for spec in cfg.reward_model.people_pairs]


def reward_fixtures(metrics: dict[str, Any], cfg: HominemConfig, folder: Path) -> CheckOutcome:
    """Warns when the scalar prefers the better reply of the contrast fixtures less often than
    `fixtures.min_accuracy`, or within any tag less often than `fixtures.min_tag_accuracy`; lists the
    pairs it got wrong. Passes, saying so, when no fixture file is configured."""
    report = _fixture_report(cfg, folder)
    if report is None:
        return CheckOutcome(True, "no contrast fixtures configured (fixtures.file is null)", {})
    f = cfg.fixtures
    return _fixture_outcome(
        report,
        f.min_accuracy,
        f.min_tag_accuracy,
        "fixtures.min_accuracy",
        "fixtures.min_tag_accuracy",
        "the better reply scored higher",
        "fixture_accuracy",
    )


def reward_dimension_fixtures(metrics: dict[str, Any], cfg: HominemConfig, folder: Path) -> CheckOutcome:
    """Warns when, on the contrast fixtures whose tag is about one dimension (`tags.own_dimension`), that
    dimension alone prefers the better reply less often than `fixtures.min_dimension_accuracy`, or within
    any tag less often than `fixtures.min_dimension_tag_accuracy`; lists the pairs it got wrong. Passes,
    saying so, when no fixture file is configured or no fixture's tag is about a dimension."""
    report = _fixture_report(cfg, folder)
    if report is None or report.dimensions is None:
        return CheckOutcome(
            True,
            "no contrast fixtures about a dimension"
            + (" configured (fixtures.file is null)" if report is None else " in fixtures.file"),
            {},
        )
    f = cfg.fixtures
    outcome = _fixture_outcome(
        report.dimensions,
        f.min_dimension_accuracy,
        f.min_dimension_tag_accuracy,
        "fixtures.min_dimension_accuracy",
        "fixtures.min_dimension_tag_accuracy",
        "each tag's own dimension scored the better reply higher",
        "dimension_accuracy",
    )
    outcome.metadata["dimension of each tag"] = ", ".join(f"{t}: {d}" for t, d in sorted(report.dimension_of.items()))
    return outcome


def _fixture_report(cfg: HominemConfig, folder: Path):
    """The fixture report written beside the model (`score_fixture_file`); None without a fixture file."""
    import json

    from hominem_pipeline.core.evaluation.fixtures import FIXTURES_JSON, FixtureReport

    if cfg.fixtures.file is None or not (folder / FIXTURES_JSON).is_file():
        return None
    return FixtureReport.from_dict(json.loads((folder / FIXTURES_JSON).read_text()))


def _fixture_outcome(
    report, floor: float, tag_floor: float, floor_key: str, tag_key: str, what: str, figure: str
) -> CheckOutcome:
    low = {t: v for t, v in report.by_tag.items() if v < tag_floor}
    passed = report.accuracy >= floor and not low
    meta: dict[str, Any] = {
        figure: report.accuracy,
        floor_key.split(".")[1]: floor,
        tag_key.split(".")[1]: tag_floor,
        **{f"tag {t}": v for t, v in report.by_tag.items()},
    }
    if report.failures:
        meta["failures"] = "\n".join(
            f"[{x['tag']}] {x['prompt']} | better: {x['better']} | worse: {x['worse']} | gap {x['gap']:+.3f}"
            for x in report.failures[:30]
        )
    tags = (
        f"; tags below {tag_key} {tag_floor:.0%}: " + ", ".join(f"{t} {v:.0%}" for t, v in sorted(low.items()))
        if low
        else ""
    )
    return CheckOutcome(
        passed,
        f"{what} in {report.accuracy:.1%} of {report.pairs} contrast fixtures "
        f"({'at or above' if report.accuracy >= floor else 'below'} {floor_key} {floor:.0%}){tags}",
        meta,
    )


def human_agreement(metrics: dict[str, Any], cfg: HominemConfig, folder: Path | None = None) -> CheckOutcome:
    """Warns when the model orders people's held-out pairs (each scored by heads fitted without it) as
    they did less often than `reward_model.min_human_agreement`; the judge's own held-out pairs beside it.
    Passes, saying so, when the window holds no human pairs."""
    floor = cfg.reward_model.min_human_agreement
    pairs = int(metrics.get("val_human_pairs") or 0)
    judge = metrics.get("val_pairwise_accuracy")
    meta = {
        "human_pairs": pairs,
        "min_human_agreement": floor,
        "judge_pairs": int(metrics.get("val_pairs") or 0),
        "judge_agreement": None if judge is None else float(judge),
    }
    beside = "" if judge is None else f"; the judge's held-out pairs {judge:.1%}"
    if not pairs:
        return CheckOutcome(
            True,
            "no human pairs in the window (import some with `hominem data import-preferences`, or give "
            "feedback in `hominem serve`)" + beside,
            meta,
        )
    agreement = float(metrics["val_human_accuracy"])
    meta["human_agreement"] = agreement
    passed = agreement >= floor
    return CheckOutcome(
        passed,
        f"people's held-out pairs ordered as they chose: {agreement:.1%} of {pairs} "
        f"({'at or above' if passed else 'below'} "
        f"reward_model.min_human_agreement {floor:.0%}){beside}",
        meta,
    )
