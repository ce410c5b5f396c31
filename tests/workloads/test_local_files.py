"""The built-in workload on a user's local model directory and JSON-lines dataset, offline."""

from __future__ import annotations

import json

import pytest
from conftest import load_trace, run_dlprof

from dlprof.core import schema
from dlprof.workloads.lora import DEFAULT_TOKENIZER

pytestmark = pytest.mark.slow


@pytest.fixture
def model_dir(tmp_path):
    """A Hugging Face model directory as save_pretrained writes it: config, weights, tokenizer."""
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(DEFAULT_TOKENIZER), eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    directory = tmp_path / "my-model"
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_local_model_and_jsonl_dataset(tmp_path, model_dir):
    dataset = tmp_path / "chat.jsonl"

    def record(i: int) -> str:
        turns = [
            {"role": "user", "content": f"问题 {i}: what is {i} + {i}?"},
            {"role": "assistant", "content": f"{i} + {i} = {2 * i}"},
        ]
        return json.dumps({"messages": turns}, ensure_ascii=False)

    dataset.write_text("\n".join(record(i) for i in range(12)), encoding="utf-8")
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path / "traces"),
        "--name",
        "local",
        "--model",
        str(model_dir),
        "--dataset",
        str(dataset),
        "--num-workers",
        "1",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "3",
        "--batch-size",
        "2",
        "--max-length",
        "64",
    )
    assert done.returncode == 0, done.stderr
    manifest = load_trace(tmp_path / "traces" / "local")[schema.MANIFEST_KEY]
    assert manifest["status"] == schema.STATUS_COMPLETE and manifest["steps"]["recorded"] == 3
    assert (manifest["loader"]["num_workers"], manifest["loader"]["batch_size"], manifest["loader"]["dataset_len"]) == (
        1,
        2,
        12,
    )
    assert str(model_dir) in manifest["script"]


def test_cuda_requested_without_cuda_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = run_dlprof("record", "--out", str(tmp_path), "--name", "nocuda", "--device", "cuda", "--steps", "49")
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1]
        == "dlprof: error: --device cuda: PyTorch sees no CUDA device here; use --device cpu (or auto)"
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "nocuda").exists()
