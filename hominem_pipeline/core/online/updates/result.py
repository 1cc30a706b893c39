"""What an online update did."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class UpdateResult:
    outcome: str  # promoted | refused | skipped
    reason: str
    version: str | None = None
    live: str | None = None  # what is live afterwards (None: the base)
    partial_rhi: float | None = None
    items: dict[str, int] = field(default_factory=dict)  # the batch by source
    actions: list[str] = field(default_factory=list)  # what the fast loop did beyond refusing: rollback, freeze
    gate: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
