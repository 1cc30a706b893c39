"""What several benchmarks share: this code's config on another project's built data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def config_on(project: Path):
    """This repo's config (this code's settings) with `project`'s data folder and student: a project built
    under older code or config is measured with the settings of the code under test."""
    from hominem_pipeline.core.config_loader import load_config

    student = load_config(root=ROOT).models.student.path
    return load_config(root=ROOT, overrides={"project": {"data_dir": str(project / "data")}, "models": {"student": {"path": str(project / student)}}})
