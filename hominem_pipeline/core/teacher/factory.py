"""The teacher named by `teacher.provider`."""

from __future__ import annotations

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.teacher.base import Teacher


def build_teacher(cfg: HominemConfig) -> Teacher:
    """The teacher named by `teacher.provider`."""
    from hominem_pipeline.core.lm.models import student_path

    if cfg.teacher.provider == "local":
        from hominem_pipeline.core.teacher.local import LocalHFTeacher

        return LocalHFTeacher(student_path(cfg), cfg, batch_size=cfg.teacher.batch_size)
    from hominem_pipeline.core.teacher.api import APITeacher

    return APITeacher(cfg)
