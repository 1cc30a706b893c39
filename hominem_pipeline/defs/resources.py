"""The one resource every asset uses: the project's configuration."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.config.loader import load_config


class HominemResource(ConfigurableResource):
    """Where the project lives and which config overlay to use (None: config/hominem.yaml alone)."""

    root: str
    config_path: str | None = None

    def load(self) -> HominemConfig:
        return load_config(self.config_path, root=Path(self.root))
