"""Published versions with made-up contents, at the version ids a config expects: for tests of what
reads the store (the retrain sensor, lineage) without running the stages."""

from __future__ import annotations

from pathlib import Path

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import ArtifactRef
from hominem_pipeline.core.pipeline.lineage import PACKAGE_ROOT, Lineage, definition_version
from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME


def publish_expected(
    cfg: HominemConfig,
    asset: str,
    day: str,
    rows: int = 0,
    files: dict[str, bytes] | None = None,
    table: str | None = None,
    text: str | None = None,
    root: Path = PACKAGE_ROOT,
    metadata: dict | None = None,
) -> ArtifactRef:
    """Publish `asset` for `day` as `cfg` expects it (its same-day inputs faked first when missing), holding `files`
    (default: one file of `text`) and `rows` (and `metadata`) in its metadata. `root`: the package source the
    versions are derived from."""
    data = Lineage(cfg, STAGES_BY_NAME, root=root)
    for inp in data.stages[asset].inputs:
        if not inp.optional and data.expected(inp.asset, day) is None:
            publish_expected(cfg, inp.asset, day, root=root)
    plan = Lineage(cfg, STAGES_BY_NAME, root=root).plan(asset, day)
    with data.store.staging(asset, day) as staged:
        for name, blob in (files or {"fake.txt": (text or f"{asset} {day} {rows}").encode()}).items():
            (staged / name).write_bytes(blob)
        # the inputs and definition as the runner records them
        return data.store.publish(
            staged,
            asset,
            day,
            plan.version,
            {
                "metadata": {"rows": rows, **(metadata or {})},
                "table": table,
                "definition": definition_version(data.stages[asset], cfg, root),
                "inputs": {a: [r.key | {"content": r.content} for r in refs] for a, refs in plan.inputs.items()},
            },
        )
