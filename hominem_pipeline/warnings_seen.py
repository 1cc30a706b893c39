"""Warnings from the libraries we use that say nothing a hominem user can act on, each read and named.
Everything else shows."""

from __future__ import annotations

import warnings

# (category, message regex, module regex): what each one is
KNOWN = [
    # MLflow's sqlite store uses a SQLAlchemy loader option SQLAlchemy 2.1 deprecates (MLflow's to change)
    (DeprecationWarning, r".*The ``noload`` loader strategy is deprecated", r"mlflow\..*"),
    # MLflow computes dataset digests with a pandas call whose positional arguments pandas 4 drops
    (DeprecationWarning, r".*all arguments of all will be keyword-only", r"mlflow\..*"),
    # transformers renamed gradient checkpointing; TRL's trainers still call the old names
    (FutureWarning, r".*is_gradient_checkpointing` is deprecated", r"transformers\..*"),
    # Dagster's own selection parser (for `--select '*'`) calls a beta parameter of its own API
    (Warning, r".*Parameter .include_sources. of function .AssetSelection.all. is currently in beta", r"dagster\..*"),
    # the live gate is a check per day of lora_adapter (defs/live.py): a partitioned asset check, a preview API
    (Warning, r".*Specifying a partitions_def on an AssetCheckSpec is currently in preview", r"dagster\..*"),
]


def silence_known() -> None:
    for category, message, module in KNOWN:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def pytest_filters() -> list[str]:
    """The same, as pytest `filterwarnings` lines (action:message:category:module)."""
    return [f"ignore:{message}:{category.__name__}:{module}" for category, message, module in KNOWN]
