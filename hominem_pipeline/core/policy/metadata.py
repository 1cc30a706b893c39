"""What a trained adapter records about itself (`METADATA.json` beside the PEFT files): the mode, the
base it was trained on, the data and reward model it came from, and how each channel contributed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

ADAPTER_METADATA = "METADATA.json"


class VersionKey(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    asset: str
    partition: str
    version: str

    def path(self, data_dir: Path) -> Path:
        return Path(data_dir) / self.asset / self.partition / self.version


class AdapterMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str  # dpo | dual | rl
    base_model: str  # the name of the base's folder it was trained on (an absolute path in older adapters)
    base_checksum: str  # of the base weights (unchanged by training)
    reward_model: VersionKey
    preference_data: list[VersionKey]
    preference_pairs: int
    memory_data: list[
        list[str]
    ]  # memory files and their digests (dual); an online update's imitated replies as replay_batch.parquet#imitated
    channel_contributions: dict[str, float]
    channels: dict[str, Any]
    lora: dict[str, Any]
    training: dict[str, Any]  # the policy settings this mode used
    date: str

    def write(self, folder: Path) -> Path:
        path = Path(folder) / ADAPTER_METADATA
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> AdapterMetadata | None:
        """The adapter's metadata, or None for an adapter trained outside the pipeline (no METADATA.json)."""
        path = Path(folder) / ADAPTER_METADATA
        return cls.model_validate_json(path.read_text()) if path.is_file() else None
