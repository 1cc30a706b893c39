"""What several benchmarks share: this code's config on another project's built data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def config_on(project: Path, overrides: dict | None = None):
    """This repo's config (this code's settings) with `project`'s data folder and student, then
    `overrides`: a project built under older code or config is measured with the settings of the code under test."""
    from hominem_pipeline.core.config.loader import deep_merge, load_config

    student = load_config(root=ROOT).models.student.path
    there = {"project": {"data_dir": str(project / "data")}, "models": {"student": {"path": str(project / student)}}}
    return load_config(root=ROOT, overrides=deep_merge(there, overrides or {}))
