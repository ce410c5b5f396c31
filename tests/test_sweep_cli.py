"""``dlprof sweep`` through Click: bad input (one line, exit code 2, nothing recorded) and one real sweep end to end."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import assert_one_line_error, invoke, load_trace, trace_files

from dlprof.capture.run_dir import default_run_name

#: A user script with a DataLoader that asks for num_workers=0: the sweep overrides it. 64 batches, far
#: more than the 1 + 1 + 4 + 5 steps the sweep's runs need before dlprof stops them.
SWEEP_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(512, 4), torch.randn(512, 1)), batch_size=8, num_workers=0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "tiny_train.py"
    path.write_text(textwrap.dedent(SWEEP_SCRIPT))
    return path


def test_sweep_help_shares_record_options():
    result = invoke("sweep", "--help")
    assert result.exit_code == 0
    for option in (
        "--workers",
        "--out",
        "--name",
        "--wait",
        "--warmup",
        "--active",
        "--reference-steps",
        "--run-to-end",
        "--loader-spans",
        "--batch-size",
        "--max-length",
        "--model",
        "--dataset",
        "--steps",
        "--format",
        "--output",
    ):
        assert option in result.output, option
    assert "--num-workers" not in result.output  # sweep sets num_workers itself
    assert "--num-workers" in invoke("record", "--help").output


@pytest.mark.parametrize(
    "value, problem",
    [
        ("0", "at least 2 different counts"),
        ("2,2", "num_workers=2 appears twice"),
        ("0,-1", "num_workers=-1 is negative"),
        ("0,a", "comma-separated whole numbers"),
        ("0,,1", "comma-separated whole numbers"),
        ("", "comma-separated whole numbers"),
        ("1.5,2", "comma-separated whole numbers"),
    ],
)
def test_bad_workers_values(tmp_path, script, value, problem):
    line = assert_one_line_error(
        invoke("sweep", "--out", str(tmp_path / "traces"), "--workers", value, "--", "python", str(script))
    )
    assert line.startswith("dlprof sweep: error: Invalid value for '--workers'") and problem in line
    assert not (tmp_path / "traces").exists()


@pytest.mark.parametrize(
    "extra, problem",
    [
        (["--run-to-end"], "--run-to-end: the in-process trials run in the steps dlprof would stop; add --launches"),
        (["--launches", "--trial-steps", "30"], "--trial-steps: the trials' option, not --launches'"),
        (["--launches", "--trial-rounds", "3"], "--trial-rounds: the trials' option, not --launches'"),
        (["--trial-rounds", "0"], "Invalid value for '--trial-rounds'"),
    ],
)
def test_options_that_do_not_go_with_the_mode(tmp_path, script, extra, problem):
    out = tmp_path / "traces"
    line = assert_one_line_error(
        invoke("sweep", "--out", str(out), "--workers", "0,1", *extra, "--", "python", str(script))
    )
    assert problem in line
    assert not out.exists()


def test_the_built_in_workload_with_steps_leaves_no_room_for_trials(tmp_path):
    line = assert_one_line_error(invoke("sweep", "--out", str(tmp_path / "t"), "--workers", "0,1", "--steps", "30"))
    assert "--steps 30: the built-in workload then trains to its end" in line and "--launches" in line
    assert not (tmp_path / "t").exists()


def test_workers_is_required(tmp_path, script):
    assert "Missing option '--workers'" in assert_one_line_error(
        invoke("sweep", "--out", str(tmp_path), "--", "python", str(script))
    )


def test_num_workers_is_not_a_sweep_option(tmp_path):
    assert "No such option '--num-workers'" in assert_one_line_error(
        invoke("sweep", "--out", str(tmp_path), "--workers", "0,1", "--num-workers", "2")
    )


def test_workload_options_with_a_command(tmp_path, script):
    line = assert_one_line_error(
        invoke(
            "sweep", "--out", str(tmp_path / "t"), "--workers", "0,1", "--batch-size", "8", "--", "python", str(script)
        )
    )
    assert "--batch-size configures the built-in workload" in line
    assert not (tmp_path / "t").exists()


def test_double_dash_without_command(tmp_path):
    assert "no command after '--'" in assert_one_line_error(
        invoke("sweep", "--out", str(tmp_path), "--workers", "0,1", "--")
    )


def test_missing_script_records_nothing(tmp_path):
    line = assert_one_line_error(
        invoke(
            "sweep",
            "--out",
            str(tmp_path / "t"),
            "--name",
            "s",
            "--workers",
            "0,1",
            "--",
            "python",
            str(tmp_path / "nope.py"),
        )
    )
    assert line.startswith("dlprof: error: ") and "nope.py: no such script" in line
    assert not (tmp_path / "t").exists()


def test_output_directory_must_exist(tmp_path, script):
    line = assert_one_line_error(
        invoke(
            "sweep",
            "--out",
            str(tmp_path / "t"),
            "--workers",
            "0,1",
            "-o",
            str(tmp_path / "no" / "r.json"),
            "--",
            "python",
            str(script),
        )
    )
    assert "does not exist" in line and not (tmp_path / "t").exists()


def test_output_extension_must_name_a_format(tmp_path, script):
    line = assert_one_line_error(
        invoke(
            "sweep",
            "--out",
            str(tmp_path / "t"),
            "--workers",
            "0,1",
            "-o",
            str(tmp_path / "r.xyz"),
            "--",
            "python",
            str(script),
        )
    )
    assert "cannot tell the format" in line


def test_default_sweep_name(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20250102-030405")
    assert default_run_name(("python", "train.py"), tmp_path, "sweep-") == "sweep-train-20250102-030405"
    assert (
        default_run_name(("python", "-m", "dlprof.workloads.lora"), tmp_path, "sweep-") == "sweep-lora-20250102-030405"
    )


@pytest.mark.slow
def test_sweep_with_launches_end_to_end(tmp_path, script):
    out = tmp_path / "traces"
    result = invoke(
        "sweep",
        "--out",
        str(out),
        "--name",
        "e2e",
        "--workers",
        "0,1",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "4",
        "--reference-steps",
        "5",
        "--launches",
        "--format",
        "json",
        "--",
        "python",
        str(script),
    )
    assert result.exit_code == 0, result.output
    assert "sweep: num_workers=0 (1/2)" in result.stderr and "sweep: num_workers=1 (2/2)" in result.stderr
    sweep_dir = out / "e2e"
    for n in (0, 1):
        assert len(trace_files(sweep_dir / str(n))) == 1
        manifest = load_trace(sweep_dir / str(n))["dlprof"]
        assert manifest["overrides"] == {"num_workers": n}
        assert manifest["loader"]["num_workers"] == n and manifest["loader"]["num_workers_requested"] == 0

    document = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert document["schema"] == "dlprof.sweep/1" and document["mode"] == "launches"
    assert document["workers"] == [0, 1]
    assert [r["num_workers"] for r in document["runs"]] == [0, 1]
    assert [r["run_dir"] for r in document["runs"]] == [str(sweep_dir / "0"), str(sweep_dir / "1")]
    assert all(r["steps_per_s"] > 0 and 0 <= r["data_wait_pct"] <= 100 for r in document["runs"])
    assert all(r["measured"] == "unprofiled" for r in document["runs"])  # 5 reference steps each
    assert document["recommendation"]["from_run"] == 0
    assert document["best_measured"]["num_workers"] in (0, 1)
    assert document["held"] in (True, False, None)
    # The sweep leads with its measured answer: the first count kept, or the fewest workers within 2 % of the best.
    headline = document["headline"]
    assert headline["basis"] == "measured"
    assert headline["text"].startswith(("num_workers 0 -> 1: ", "keep num_workers=0"))
    assert headline["change"] in ("num_workers 0 -> 1", None) and document["dlprof_version"]

    scalars = sweep_dir / "scalars"
    files = [p.name for p in scalars.iterdir()]
    assert any(name.startswith("events.out.tfevents.") for name in files)
    assert not [name for name in files if name.endswith((".json", ".gz"))]


#: The same training for many epochs: dlprof stops it once the in-process trials are done.
EPOCHS_SCRIPT = SWEEP_SCRIPT.replace("for x, y in loader:", "for x, y in (b for _ in range(1000) for b in loader):")


@pytest.mark.slow
def test_sweep_in_process_end_to_end(tmp_path):
    script = tmp_path / "epochs_train.py"
    script.write_text(textwrap.dedent(EPOCHS_SCRIPT))
    out = tmp_path / "traces"
    args = ["--out", str(out), "--name", "e2e", "--workers", "1,0", "--wait", "1", "--warmup", "1", "--active", "3"]
    args += ["--reference-steps", "5", "--trial-steps", "20", "--trial-rounds", "2", "--format", "json"]
    result = invoke("sweep", *args, "--", "python", str(script))
    assert result.exit_code == 0, result.output
    assert "sweep: one launch at num_workers=1, then num_workers 1, 0 tried in it, 2 round(s)" in result.stderr
    sweep_dir = out / "e2e"
    manifest = load_trace(sweep_dir)["dlprof"]  # one launch, recorded into the sweep directory itself
    assert manifest["overrides"] == {"num_workers": 1} and manifest["trials"]["counts"] == [1, 0]
    document = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert (document["mode"], document["rounds"], document["rounds_planned"]) == ("in-process", 2, 2)
    assert [r["num_workers"] for r in document["runs"]] == [1, 0]
    assert {r["run_dir"] for r in document["runs"]} == {str(sweep_dir)}
    assert all(r["steps_per_s"] > 0 and 0 <= r["data_wait_pct"] <= 100 for r in document["runs"])
    assert all(r["measured"] == "unprofiled" and r["spread_pct"] is not None for r in document["runs"])
    assert document["recommendation"]["from_run"] == 1
    # The trials' speeds are the ones dlprof analyze shows for the same run.
    report = json.loads(invoke("analyze", str(sweep_dir), "--format", "json").stdout)
    by_count = {r["num_workers"]: r for r in report["trials"]["runs"] if not r["persistent_workers"]}
    basis = "epoch_steps_per_s" if document["basis"] == "over whole epochs" else "steps_per_s"
    assert [r["steps_per_s"] for r in document["runs"]] == [by_count[1][basis], by_count[0][basis]]
    assert any(p.name.startswith("events.out.tfevents.") for p in (sweep_dir / "scalars").iterdir())
