"""The ``dlprof`` Click group: help, version, one real ``record`` in-process, and default run names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from conftest import invoke

import dlprof
from dlprof.capture.run_dir import default_run_name

TRAIN_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, num_workers=0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:  # 8 steps
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_help_lists_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "record" in result.output and "--version" in result.output


def test_record_help_lists_options():
    result = invoke("record", "--help")
    assert result.exit_code == 0
    for option in ("--num-workers", "--wait", "--warmup", "--active", "--loader-spans", "--out", "--name", "--dataset"):
        assert option in result.output, option


def test_version_prints_package_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert dlprof.__version__ in result.output and "dlprof" in result.output


@pytest.mark.slow
def test_record_user_script_in_process(tmp_path):
    script = tmp_path / "tiny_train.py"
    script.write_text(textwrap.dedent(TRAIN_SCRIPT))
    out = tmp_path / "traces"
    result = invoke(
        "record",
        "--out",
        str(out),
        "--name",
        "cli",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "4",
        "--",
        "python",
        str(script),
    )
    assert result.exit_code == 0, result.output
    traces = list((out / "cli").glob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    assert str(traces[0]) in result.output
    assert "recorded 4 steps (complete)" in result.output


def test_python_m_dlprof_help():
    done = subprocess.run([sys.executable, "-m", "dlprof", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "record" in done.stdout


@pytest.fixture
def fixed_time(monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20250102-030405")


def test_default_run_name_uses_script_stem(tmp_path, fixed_time):
    assert default_run_name(("python", "train.py", "--lr", "1"), tmp_path) == "train-20250102-030405"


def test_default_run_name_uses_module_name(tmp_path, fixed_time):
    name = default_run_name(("python", "-m", "dlprof.workloads.lora", "--batch-size", "4"), tmp_path)
    assert name == "lora-20250102-030405"


def test_default_run_name_of_a_launcher_is_the_script_else_the_launcher(tmp_path, fixed_time):
    assert (
        default_run_name(("torchrun", "--nproc-per-node", "2", "train_ddp.py"), tmp_path) == "train_ddp-20250102-030405"
    )
    assert default_run_name(("swift", "sft", "--model", "Qwen2.5-7B"), tmp_path) == "swift-20250102-030405"


def test_default_run_name_is_real_time_stamp(tmp_path):
    name = default_run_name(("python", "train.py"), tmp_path)
    assert name.startswith("train-") and len(name) == len("train-YYYYmmdd-HHMMSS")


def test_default_run_name_adds_suffix_when_taken(tmp_path, fixed_time):
    (tmp_path / "train-20250102-030405").mkdir()
    assert default_run_name(("python", "train.py"), tmp_path) == "train-20250102-030405-2"
    (tmp_path / "train-20250102-030405-2").mkdir()
    assert default_run_name(("python", "train.py"), tmp_path) == "train-20250102-030405-3"
