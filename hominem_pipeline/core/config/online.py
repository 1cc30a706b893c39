"""The live loop's settings: the replay buffer, online updates (with people's nudges) and the slow loop
(re-exported by `config`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import _Frozen


class ReplayConfig(_Frozen):
    recent_items: int = Field(
        ge=1, description="The newest this many items of the replay buffer count as recent, >= 1."
    )
    recent_fraction: float = Field(ge=0.0, le=1.0, description="Share of a batch drawn from the recent items, 0-1.")
    priority_fraction: float = Field(
        ge=0.0, le=1.0, description="Share of each side drawn in proportion to priority (the rest uniformly), 0-1."
    )
    intensity_weight: float = Field(ge=0.0, description="Priority weight of an item's reward intensity, >= 0.")
    social_weight: float = Field(
        ge=0.0,
        description="Priority weight of its social salience (the mean of social_dimensions, mapped to 0-1), >= 0.",
    )
    novelty_weight: float = Field(
        ge=0.0,
        description="Priority weight of its prompt's novelty (1 - its largest word-count cosine to an earlier "
        "prompt), >= 0.",
    )
    social_dimensions: list[str] = Field(
        min_length=1, description="Dimensions whose mean is an item's social salience."
    )
    unsafe_below: float = Field(
        ge=0.0, le=1.0, description="An item whose safety score is below this is deprioritised, 0-1."
    )
    unsafe_factor: float = Field(ge=0.0, le=1.0, description="... its priority times this (never dropped), 0-1.")


class NudgesConfig(_Frozen):
    half_life_days: float = Field(
        gt=0.0, le=365.0, description="A nudge's pull halves every this many days, (0, 365]."
    )
    saturation: float = Field(
        gt=0.0, description="Net nudges on a dimension that give it pressure tanh(1) = 0.76, > 0."
    )
    strength: float = Field(
        ge=0.0,
        description="A replay pair weighs exp(strength * sum of pressure * the dimension's gap between its replies "
        "by the reward model), >= 0; 0: no weights.",
    )
    max_factor: float = Field(ge=1.0, description="Those weights are clipped to [1/max_factor, max_factor], >= 1.")
    pair_share: float = Field(
        ge=0.0,
        le=1.0,
        description="Dimension pairs, as a share of an update's batch_items (two candidates to one prompt, the "
        "teacher's or with `samples` the student's own, scored by the reward model, that differ on a "
        "pressed dimension while the others hold), 0-1.",
    )
    min_gap: float = Field(
        ge=0.0,
        le=10.0,
        description="A dimension pair's replies differ on the pressed dimension by at least this many standard "
        "deviations (of each dimension over the candidates), 0-10.",
    )
    tolerance: float = Field(
        ge=0.0, le=10.0, description="... while the others hold within this many (as `hold` says), 0-10."
    )
    hold: Literal["mean", "each", "each_first"] = Field(
        description="mean: the mean of the other dimensions' gaps within tolerance | each: no other dimension lower "
        "in the chosen reply by more than tolerance | each_first: the pairs that hold each first, then "
        "those that hold the mean."
    )
    pair_rows: Literal["share", "extra"] = Field(
        description="share: dimension pairs take replay items' places in the batch | extra: the batch keeps "
        "batch_items replay items and each dimension pair is trained on once per update, ceil(pairs / "
        "max_steps) rows beside each step's batch_size."
    )
    imitate: bool = Field(
        description="Each dimension pair's chosen reply is also a memory row of the update (an SFT target at "
        'policy.dual.memory_weight): the student imitates the reply with more (for "less": less) of '
        "the pressed dimension; false: the pairs' DPO term and their chosen replies' SFT at sft_weight "
        "only."
    )
    max_steps: int | None = Field(
        ge=2, description="Optimizer steps of an update while nudges press, >= 2; null: online.max_steps."
    )
    pair_weight: float = Field(
        ge=0.0,
        le=10.0,
        description="A dimension pair's weight on its reward intensity in the dual loss (the replay pairs' weights "
        "average 1), 0-10.",
    )
    samples: int = Field(
        ge=0,
        le=32,
        description="Replies sampled from the live adapter to each nudged conversation and added, with the nudged "
        "reply, to the dimension pairs' candidates, 0-32; 0: the teacher's candidates only.",
    )
    sample_prompts: int = Field(
        ge=1, le=64, description="... to the newest this many conversations people nudged, 1-64."
    )


class TasteConfig(_Frozen):
    min_choices: int = Field(
        ge=0,
        description="A person's preference pairs before their taste model (core/attune/personal.py) ranks the "
        "student's own replies into pairs for the update, >= 0; 0: off.",
    )
    prompts: int = Field(ge=1, le=64, description="Their newest messages the student answers for it, 1-64.")
    samples: int = Field(ge=2, le=16, description="Replies to each, sampled as served, 2-16.")
    min_probability: float = Field(
        ge=0.5,
        le=1.0,
        description="The taste model's chance that the person prefers the best of a message's replies over the "
        "worst, for the two to become a pair, 0.5-1.",
    )
    share: float = Field(
        ge=0.0,
        le=1.0,
        description="The most of online.batch_items the taste pairs take (the replay buffer's pairs fill the rest), "
        "0-1.",
    )
    held_out: float = Field(
        ge=0.0,
        le=0.5,
        description="The share of each person's choices after their first min_choices never trained on (chosen by "
        "the choice's id, so a choice "
        "stays out): an update trained on their taste is judged on them (gate check choices:<rater>; with 8 "
        "or more, else reported), 0-0.5; 0: none.",
    )
    endings: int = Field(
        ge=0,
        le=16,
        description="0: a taste pair is the best and the worst of a message's whole replies; n: of n endings sampled "
        "after one opening of the message (all but the last sentence of its first sampled reply with two or more), "
        "the reply it was cut from among them, so the pair differs only in its ending, 0-16.",
    )
    imitate: bool = Field(
        description="true: the chosen reply of each taste pair and of each person's choice in the batch is also a "
        "memory row of the update (an SFT target at policy.dual.memory_weight), imitated beside the pair's DPO term; "
        "false: the pair's DPO term and its chosen reply's SFT at policy.dual.sft_weight.",
    )


class OnlineConfig(_Frozen):
    scheduler: bool = Field(
        description="`hominem serve` runs online updates by itself (after every_events feedback events, or "
        "every_minutes); false: only on demand (`hominem live update`, POST /admin/live/update)."
    )
    every_events: int = Field(
        ge=1, description="New feedback events (thumbs, choices, nudges, emotions) that start an update, >= 1."
    )
    every_minutes: float | None = Field(
        gt=0.0,
        description="An update this often while any feedback came in since the last one, minutes > 0; null: by "
        "count only.",
    )
    batch_items: int = Field(ge=1, description="Replay items (preference pairs) one update trains on, >= 1.")
    max_steps: int = Field(
        ge=2,
        description="Optimizer steps of one update (the rest of the training settings are policy's), >= 2 (GVS "
        "needs two).",
    )
    update_nice: int = Field(
        ge=0,
        le=19,
        description="The priority (as `nice`) of the update process `hominem serve` runs: 0 (the server's own) to 19 "
        "(the lowest); it trains and is judged on the CPU the server's replies leave.",
    )
    people_pairs: int = Field(
        ge=0,
        description="The fast-loop gate compares the implicit reward of update and live adapter on the first N of "
        "the people's held-out pairs (health.people_margin), >= 0; 0: not measured.",
    )
    reply_check_items: int = Field(
        ge=0,
        description="The fast-loop gate asks candidate and live adapter the first N items of each reply check "
        "(evaluation.reply_checks; health.reply_margins), >= 0; 0: not asked. The daily gate asks them all.",
    )
    learning_rate: float | None = Field(
        gt=0.0,
        description="Peak learning rate of an update (it decays linearly over max_steps); null: policy.learning_rate.",
    )
    teacher_days: int = Field(
        ge=0,
        description="Newest days of the teacher's preference pairs the live adapter was trained on that the replay "
        "buffer holds beside people's pairs, >= 0 (0: none).",
    )
    teacher_share: float | None = Field(
        ge=0.0,
        le=1.0,
        description="The share of an update's batch_items taken from the teacher's pairs (an anchor against "
        "forgetting what the daily training taught), the people's pairs and taste pairs the rest, 0-1; null: as the "
        "replay buffer mixes them (replay.recent_items, replay.recent_fraction).",
    )
    feedback_days: int = Field(
        ge=1, description="Days of the interaction log whose feedback pairs the replay buffer holds, >= 1."
    )
    rehearse_memory: bool = Field(
        description="Every memory row is trained on once per update (ceil(rows / max_steps) memory rows beside each "
        "step's batch_size pairs); false: policy.dual's mixing."
    )
    facts_by: Literal["rules", "teacher", "both"] = Field(
        description="Who reads people's messages for facts: rules (patterns: offline, instant, the shapes they "
        "know) | teacher (the configured teacher, a call per new message, its answer checked) | both."
    )
    memory_folder: str | None = Field(
        description="Facts and corrections people state in conversation are written here as conversations.jsonl, "
        "memory rows the update (and the daily adapter) trains on and the memory probe asks; keep the "
        "folder among policy.dual.memory_files; null: not extracted."
    )
    liked_replies: int = Field(
        ge=0,
        description="The newest N replies people thumbed up are kept in memory_folder as liked.jsonl: memory rows "
        "(SFT targets) the update and the daily adapter train on, >= 0; 0: none.",
    )
    skip_below: float | None = Field(
        ge=0.0,
        le=1.0,
        description="Fast-loop gate: an update whose partial RHI (DCS and GVS) is below this is not promoted, 0-1; "
        "null: the health calibration's (fast_loop.thresholds).",
    )
    rollback_below: float | None = Field(
        ge=0.0,
        le=1.0,
        description="... below this the online update live now is rolled back too, 0-1; null: the calibration's.",
    )
    freeze_below: float | None = Field(
        ge=0.0,
        le=1.0,
        description="... below this online updates are also frozen until `hominem live unfreeze`, 0-1; null: the "
        "calibration's.",
    )
    taste: TasteConfig = Field(
        description="Each person's taste model ranks the student's own replies to their messages into pairs "
        "(source taste:<rater>), so a choice teaches more than the pair it was made on."
    )
    nudges: NudgesConfig = Field(
        description="People's nudges (\"more empathy\") as pressure on the dimensions: the update's pairs weighted "
        "by it, and dimension pairs added."
    )

    @model_validator(mode="after")
    def _ordered(self) -> OnlineConfig:
        set_ = [x for x in (self.freeze_below, self.rollback_below, self.skip_below) if x is not None]
        if set_ != sorted(
            set_
        ):  # those left null come from the calibration, where the order is checked (`calibration.fast_loop`)
            raise ValueError(
                f"online: freeze_below {self.freeze_below} <= rollback_below {self.rollback_below} <= "
                f"skip_below {self.skip_below} must hold"
            )
        return self


class PrivacyConfig(_Frozen):
    retention_days: int | None = Field(
        ge=1,
        description="Raw conversations are kept this many days (>= 1): older days of the interaction log, their "
        "rows in the history index and their human_feedback versions are removed at every stage build and at "
        "service start, so no new build reads them. null: kept until a person is forgotten.",
    )


class HistoryConfig(_Frozen):
    url: str | None = Field(
        description="The preference history index's database, a SQLAlchemy URL "
        "(postgresql+psycopg2://user@host:5432/hominem); null: sqlite at data/history.sqlite. "
        "$HOMINEM_HISTORY_URL, when set, is used instead."
    )
    domains: bool = Field(
        description="Each indexed turn gets the seed category its user message lies nearest (the shipped encoder); "
        "false: no domains, `pairs --domain` finds nothing."
    )


SLOW_LOOP_STEPS = ("lower_lr", "shrink_rank", "freeze")


class SlowLoopConfig(_Frozen):
    enabled: bool = Field(
        description="The nightly RHI trend acts: falling nights step down the ladder, "
        "rising nights step back up, a dip after a promotion reverts it; false: nights are only "
        "recorded."
    )
    falling_nights: int = Field(
        ge=1,
        le=30,
        description="Nights in a row whose RHI fell (by more than min_fall) that take the next step of the ladder, "
        "1-30.",
    )
    min_fall: float = Field(
        ge=0.0,
        le=0.5,
        description="A night counts as falling (or rising) only when its RHI moved by more than this from the night "
        "before, 0-0.5.",
    )
    recovery_nights: int = Field(
        ge=1, le=30, description="Nights in a row whose RHI rose that undo the last step taken, 1-30."
    )
    steps: list[Literal["lower_lr", "shrink_rank", "freeze"]] = Field(
        min_length=1,
        description="The ladder, in the order falling nights take it: lower_lr (the next adapters' learning rate, "
        "daily and online, times lr_factor), shrink_rank (the next daily adapters' LoRA rank and alpha "
        "times rank_factor: the people's start is cut to it by SVD), freeze (online updates and "
        "promotions stop).",
    )
    lr_factor: float = Field(
        gt=0.0,
        lt=1.0,
        description="lower_lr multiplies policy.learning_rate and online.learning_rate by this, (0, 1).",
    )
    rank_factor: float = Field(
        gt=0.0, lt=1.0, description="shrink_rank multiplies policy.lora.r and alpha by this (rank at least 1), (0, 1)."
    )
    revert_dip: float | None = Field(
        ge=0.0,
        le=1.0,
        description="The night after the daily adapter went live (a consolidation), an RHI this far below the one "
        "it went live with rolls it back, 0-1; null: never.",
    )

    @model_validator(mode="after")
    def _once_each(self) -> SlowLoopConfig:
        if len(set(self.steps)) != len(self.steps):
            raise ValueError(
                f"slow_loop.steps {self.steps} names a step twice; each of {', '.join(SLOW_LOOP_STEPS)} at most once"
            )
        return self
