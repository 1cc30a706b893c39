"""hominem: distill a human-like reward signal into a reward model and LoRA adapters on a student."""

import os

# MLflow 3 reports usage to its makers (client and UI server) unless told not to. Runs of this project
# stay on this machine, as Dagster's do (dagster.yaml: telemetry off); set it to false to opt in.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
