"""The reward model as an MLflow pyfunc: `mlflow.pyfunc.load_model("models:/hominem-reward-model@current")`
scores a DataFrame of (prompt, response) rows, for tools that know MLflow and not hominem."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

INPUT_COLUMNS = ("prompt", "response")
# Packages the model needs besides hominem itself (which must be installed where it is loaded).
PIP_REQUIREMENTS = ["torch", "transformers", "safetensors", "pandas", "numpy"]


def output_columns(dimensions: list[str]) -> list[str]:
    return ["scalar", "reward_intensity", "safety_score", *dimensions, "uncertainty_scalar"]


class RewardModelPyfunc(mlflow.pyfunc.PythonModel):
    """Wraps `RewardModel`: one row per (prompt, response), columns per `output_columns`."""

    def load_context(self, context: Any) -> None:
        from hominem_pipeline.core.reward.model import RewardModel

        self.model = RewardModel.load(context.artifacts["reward_model"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        missing = [c for c in INPUT_COLUMNS if c not in model_input.columns]
        if missing:
            raise ValueError(
                f"the reward model scores a DataFrame with columns {list(INPUT_COLUMNS)}; missing {missing}"
            )
        outputs = self.model.score(list(model_input["prompt"].astype(str)), list(model_input["response"].astype(str)))
        rows = [
            {
                "scalar": o.scalar,
                "reward_intensity": o.reward_intensity,
                "safety_score": o.safety_score,
                **o.vector,
                "uncertainty_scalar": o.uncertainty["scalar"],
            }
            for o in outputs
        ]
        return pd.DataFrame(rows, columns=output_columns(self.model.dimensions), index=model_input.index)


def log_reward_pyfunc(model_dir: Path) -> str:
    """Log a saved model folder as a pyfunc model in the active MLflow run; returns its model URI."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    from hominem_pipeline.core.reward.metadata import RewardMetadata

    dimensions = RewardMetadata.read(Path(model_dir)).dimensions
    signature = ModelSignature(
        inputs=Schema([ColSpec("string", c) for c in INPUT_COLUMNS]),
        outputs=Schema([ColSpec("double", c) for c in output_columns(dimensions)]),
    )
    with warnings.catch_warnings():
        # The signature above is explicit; an input example would only make MLflow load the model to check it.
        warnings.filterwarnings("ignore", message=".*An input example was not provided", category=UserWarning)
        info = mlflow.pyfunc.log_model(
            name="reward_model",
            python_model=RewardModelPyfunc(),
            artifacts={"reward_model": str(model_dir)},
            signature=signature,
            pip_requirements=PIP_REQUIREMENTS,
        )
    return info.model_uri
