"""hominem: distill a human-like reward signal into a reward model and LoRA adapters on a student."""

import os
import sys

# MLflow 3 reports usage to its makers (client and UI server) unless told not to. Runs of this project
# stay on this machine, as Dagster's do (dagster.yaml: telemetry off); set it to false to opt in.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# On a Mac, an operation the Apple GPU (runtime.device: mps) lacks runs on the CPU instead of failing; torch reads
# this when it loads, so it is set before anything here imports torch. Set it to 0 to see such operations fail.
if sys.platform == "darwin":
    os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
