"""The gate's greedy replies per adapter version, kept so that each adapter answers each item once (see
`ReplyCache`)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.config import HominemConfig

SHIPPED_BASE_REPLIES = "base-replies.json"  # in the shipped features folder, after the decoding's key


def decoding_key(evaluation: Any, student_digest: str) -> str:
    """The key of one decoding: the evaluation's settings but its batch size, and the student's files' digest
    (`folder_digest` of its folder, as the shipped features' MANIFEST names it)."""
    from hominem_pipeline.core.pipeline.artifacts import fingerprint

    return fingerprint([evaluation.model_dump(mode="json", exclude={"batch_size"}), student_digest], 16)


class ReplyCache:
    """The gate's greedy replies per adapter version (`<folder>/<version>.json`, `base.json` for the base alone),
    valid for one decoding (the evaluation's settings but its batch size, and the student's files, wherever its folder
    is; greedy decoding draws nothing, so no seed; a batch's padding changes a greedy reply only where two tokens are
    nearly tied): a
    candidate's replies are the next gate's live replies once it is promoted, and the daily adapter's come from its
    evaluation (`promotion.reuse_evaluation_replies`), so each adapter answers the held-out prompts once. The base's
    are also read from the project's shipped copy for this decoding (`shipped_base_replies`), so a fresh clone's
    first day generates none of the base's replies the project ships."""

    def __init__(self, folder: Path, cfg: HominemConfig):
        from hominem_pipeline.core.lm.models import student_path
        from hominem_pipeline.core.pipeline.artifacts import folder_digest
        from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

        self.folder = Path(folder)
        self.key = decoding_key(cfg.evaluation, folder_digest(student_path(cfg)))
        self.shipped = cfg.path(SHIPPED_FEATURES) / f"{self.key}-{SHIPPED_BASE_REPLIES}"

    @functools.cached_property
    def shipped_base_replies(self) -> dict[str, str]:
        """The base's replies the project ships for this decoding (`hominem data ship-features --base-replies`),
        read once."""
        try:
            shipped = json.loads(self.shipped.read_text())
        except (OSError, ValueError):
            return {}
        return shipped.get("replies", {}) if shipped.get("decoding") == self.key else {}

    def ship_base_replies(self) -> tuple[Path, int]:
        """Write the base's replies this cache holds (the shipped ones with those generated since) as the project's
        shipped copy. Returns the file and how many replies it holds."""
        replies = self.get(None)
        self.shipped.parent.mkdir(parents=True, exist_ok=True)
        body = {"decoding": self.key, "replies": dict(sorted(replies.items()))}
        write_text_atomic(self.shipped, json.dumps(body, ensure_ascii=False, indent=0) + "\n")
        return self.shipped, len(replies)

    def _path(self, version: str | None) -> Path:
        return self.folder / f"{version or 'base'}.json"

    def _read(self, version: str | None) -> dict[str, Any]:
        try:
            saved = json.loads(self._path(version).read_text())
        except (OSError, ValueError):  # none yet, or a torn write: generated again
            return {}
        return saved if saved.get("decoding") == self.key else {}

    def get(self, version: str | None) -> dict[str, str]:
        own = self._read(version).get("replies", {})
        return {**self.shipped_base_replies, **own} if version is None else own

    def scalars(self, version: str | None, reward_model: str | None) -> dict[str, float]:
        """The scalar `reward_model` (its folder) gave each of the version's replies, by prompt."""
        return self._read(version).get("scalars", {}).get(reward_model, {}) if reward_model else {}

    def margins(self, version: str | None) -> dict[str, float]:
        """The version's implicit reward on each people's held-out pair it was measured on, by pair id."""
        return self._read(version).get("people_margins", {})

    def put(
        self,
        version: str | None,
        replies: dict[str, str],
        scalars: dict[str, float] | None = None,
        reward_model: str | None = None,
        margins: dict[str, float] | None = None,
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        saved = self._read(version)
        by_model = saved.get("scalars", {})
        if scalars and reward_model:
            by_model[reward_model] = {**by_model.get(reward_model, {}), **scalars}
        merged = {
            "decoding": self.key,
            "replies": {**saved.get("replies", {}), **replies},
            "scalars": by_model,
            "people_margins": {**saved.get("people_margins", {}), **(margins or {})},
        }
        if merged == saved:
            return  # nothing new: the file stays as it is
        write_text_atomic(self._path(version), json.dumps(merged, ensure_ascii=False))


def reply_cache(cfg: HominemConfig) -> ReplyCache:
    """The project's reply cache (`data/live/replies/`)."""
    from hominem_pipeline.core.online.live import REPLIES, LiveState

    return ReplyCache(LiveState(cfg.data_dir).dir / REPLIES, cfg)
