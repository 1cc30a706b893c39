"""The student leaves as GGUF: llama.cpp's own converter writes the merged student (f16, Q8_0) and the adapter alone,
and a reader that is not the converter (transformers' GGUF loader) finds the same model in the file."""

import json

import pytest
import torch

from hominem_pipeline.core.policy.gguf import F16_TOLERANCE, export_gguf, export_gguf_lora
from hominem_pipeline.core.policy.lora import load_policy
from hominem_pipeline_tests.serving.conftest import make_adapter

PROMPTS = ["The capital of France is", "I feel sad today because", "Write a haiku about rain:"]
TOLERANCE = {"f16": F16_TOLERANCE, "q8_0": 0.5}  # nats: the largest difference of a top-10 next-token log-probability


def next_logprobs(model, tokenizer, prompt: str) -> torch.Tensor:
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        return torch.log_softmax(model(ids).logits[0, -1].float(), -1)


def test_the_merged_student_as_gguf_loads_elsewhere_with_the_same_next_tokens(tiny_student, tmp_path):
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = make_adapter(tiny_student, tmp_path / "adapter")
    policy, tokenizer = load_policy(tiny_student, adapter)
    merged = policy.merge_and_unload().eval()
    for outtype in ("f16", "q8_0"):
        out = tmp_path / "out" / f"student-{outtype}.gguf"
        info = export_gguf(adapter, out, tiny_student, outtype)
        sidecar = json.loads((tmp_path / "out" / f"student-{outtype}.gguf.json").read_text())
        assert sidecar == info and info["adapter_version"] == "adapter" and len(info["sha256"]) == 64
        fields = GGUFReader(out).fields
        assert "tokenizer.chat_template" in fields and "tokenizer.ggml.tokens" in fields
        reread = AutoModelForCausalLM.from_pretrained(out.parent, gguf_file=out.name, dtype=torch.float32).eval()
        reread_tokenizer = AutoTokenizer.from_pretrained(out.parent, gguf_file=out.name)
        for prompt in PROMPTS:
            assert reread_tokenizer(prompt).input_ids == tokenizer(prompt).input_ids
            want, got = next_logprobs(merged, tokenizer, prompt), next_logprobs(reread, tokenizer, prompt)
            top = want.topk(10).indices
            drift = (want[top] - got[top]).abs().max().item()
            assert drift < TOLERANCE[outtype], (outtype, prompt, drift)
            margin = (want[top[0]] - want[top[1]]).item()  # a random tiny model's next tokens nearly tie
            assert want.argmax() == got.argmax() or margin < 2 * drift, (outtype, prompt, margin, drift)
    with pytest.raises(FileExistsError, match="exists"):
        export_gguf(adapter, out, tiny_student, "q8_0")
    with pytest.raises(ValueError, match="use one of f16, q8_0"):
        export_gguf(adapter, tmp_path / "x.gguf", tiny_student, "q4_k")


def test_the_adapter_alone_is_a_gguf_lora_with_its_two_matrices_per_target(tiny_student, tmp_path):
    from gguf import GGUFReader

    adapter = make_adapter(tiny_student, tmp_path / "adapter")
    info = export_gguf_lora(adapter, tmp_path / "lora.gguf", tiny_student)
    reader = GGUFReader(tmp_path / "lora.gguf")
    names = [t.name for t in reader.tensors]
    assert info["format"] == "GGUF LoRA f16" and str(reader.fields["general.type"].contents()) == "adapter"
    assert len(names) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    assert all(n.endswith((".lora_a", ".lora_b")) for n in names)


def test_a_converter_that_fails_midway_leaves_no_file_and_the_next_export_is_not_refused(
    tiny_student, tmp_path, monkeypatch
):
    """A converter that dies after writing part of its file (here a stand-in for llama.cpp's, which writes 2 KB and
    exits 1): the error names the script and its last words, nothing is left under the name asked for, and the
    export run again with the real converter writes the whole file."""
    from hominem_pipeline.core.policy.gguf import CONVERTERS_ENV, converters

    real = converters()
    broken = tmp_path / "broken-llama.cpp"
    broken.mkdir()
    for script in ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py"):
        (broken / script).write_text(
            "import sys\n"
            "out = sys.argv[sys.argv.index('--outfile') + 1]\n"
            "open(out, 'wb').write(b'GGUF' + bytes(2048))\n"
            "sys.exit('killed while writing tensors')\n"
        )
    adapter = make_adapter(tiny_student, tmp_path / "adapter")
    out = tmp_path / "out" / "student.gguf"
    monkeypatch.setenv(CONVERTERS_ENV, str(broken))
    with pytest.raises(RuntimeError, match=r"convert_hf_to_gguf.py failed \(exit 1\):\nkilled while writing tensors"):
        export_gguf(adapter, out, tiny_student)
    with pytest.raises(RuntimeError, match="convert_lora_to_gguf.py failed"):
        export_gguf_lora(adapter, tmp_path / "lora.gguf", tiny_student)
    assert sorted(p.name for p in out.parent.iterdir()) == [] and not (tmp_path / "lora.gguf").exists()
    monkeypatch.setenv(CONVERTERS_ENV, str(real))
    assert export_gguf(adapter, out, tiny_student)["bytes"] == out.stat().st_size > 2048


def test_llama_cpp_itself_loads_each_gguf_with_the_same_next_tokens_and_chats_through_its_template(
    tiny_student, tmp_path
):
    from hominem_pipeline.core.policy.gguf import llama_cpp_check

    adapter = make_adapter(tiny_student, tmp_path / "adapter")
    policy, tokenizer = load_policy(tiny_student, adapter)
    merged = policy.merge_and_unload().eval()
    for outtype in ("f16", "q8_0"):
        out = export_gguf(adapter, tmp_path / f"student-{outtype}.gguf", tiny_student, outtype)
        check = llama_cpp_check(tmp_path / out["file"], merged, tokenizer, PROMPTS, chat="Hello, who are you?")
        for row in check["prompts"]:
            assert row["max_top10_diff"] < TOLERANCE[outtype], (outtype, row)
            assert row["top1_same"] or row["margin"] < 2 * row["max_top10_diff"], (outtype, row)
        assert check["chat_format"] == "chat_template.default"  # the file's own template, not a guessed one
        assert isinstance(check["chat"], str)
