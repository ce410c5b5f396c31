"""Every bad input to ``dlprof record``: one stderr line naming the problem and the fix, exit code 2,
no traceback, and no run directory left behind; and the traces that broke the reader, through ``dlprof analyze``
and ``dlprof diff``: one line, or a report that never prints NaN."""

from __future__ import annotations

import gzip
import html
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, run_dlprof

from dlprof.capture import record as record_module
from dlprof.cli import cli
from dlprof.core.errors import RecordError

RUN = "run"
SCRIPT = "import sys\n"  # never run: every case fails before training starts


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="dlprof")


def assert_one_line_error(stderr: str, output: str, names: str) -> str:
    """The dlprof error line, checked: the last stderr line, naming ``names``."""
    lines = stderr.strip().splitlines()
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert last.startswith("dlprof") and "error:" in last, last
    assert names in last, f"{names!r} not named in: {last}"
    assert "Traceback" not in output
    return last


def assert_no_run_left(out: Path, name: str = RUN) -> None:
    assert not (out / name).exists(), f"{out / name} left behind: {list((out / name).rglob('*'))}"


def assert_cli_error(result, out: Path, names: str, name: str = RUN) -> str:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # the whole stderr is one line
    last = assert_one_line_error(result.stderr, result.output, names)
    assert_no_run_left(out, name)
    return last


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "traces"


@pytest.fixture
def script(tmp_path) -> str:
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return str(path)


# --- datasets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('[{"instruction": "a"', "not valid JSON"),
        ('{"instruction": "a", "output": "b"}\n{"instruction": "c", "output": \n', "line 2 is not valid JSON"),
        ('[{"instruction": "a"}]', "record 1 has no known format"),
        ("", "the file is empty"),
        ("[]", "holds no records"),
    ],
    ids=["malformed-json", "jsonl-broken-line-2", "no-response", "empty", "empty-array"],
)
def test_bad_dataset(tmp_path, out, content, problem):
    dataset = tmp_path / "data.json"
    dataset.write_text(content)
    last = assert_cli_error(
        invoke("record", "--out", str(out), "--name", RUN, "--dataset", str(dataset)), out, str(dataset)
    )
    assert problem in last


def test_missing_dataset(tmp_path, out):
    missing = str(tmp_path / "nope.json")
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, "--dataset", missing), out, missing)
    assert "no such dataset file" in last


# --- model and tokenizer --------------------------------------------------------------------------


def test_model_dir_without_config(tmp_path, out):
    model = tmp_path / "model"
    model.mkdir()
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, "--model", str(model)), out, str(model))
    assert "no config.json" in last


@pytest.mark.parametrize("option", ["--model", "--tokenizer"])
def test_missing_model_or_tokenizer(tmp_path, out, option):
    missing = str(tmp_path / "absent")
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, option, missing), out, missing)
    assert "no such" in last


# --- workload options and schedule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names", "fix"),
    [
        (["--device", "tpu"], "--device tpu", "auto, cpu, cuda"),
        (["--num-workers", "-1"], "--num-workers -1", ">= 0"),
        (["--batch-size", "0"], "--batch-size 0", ">= 1"),
        (["--num-workers", "x"], "--num-workers", "not a valid integer"),
        (["--prefetch-factor", "2", "--num-workers", "0"], "--prefetch-factor", "--num-workers 1 or more"),
        (["--persistent-workers", "--num-workers", "0"], "--persistent-workers", "--num-workers 1 or more"),
        (["--steps", "3"], "--steps 3", "use --steps 49 or more"),
        (["--steps", "60", "--active", "20"], "--steps 60", "raise --steps or lower --active"),
        (["--warmup", "-2"], "--warmup -2", ">= 0"),
        (["--name", "bad/name"], "--name 'bad/name'", "letters, digits"),
    ],
    ids=[
        "device",
        "num-workers",
        "batch-size",
        "not-int",
        "prefetch",
        "persistent",
        "steps",
        "steps-active",
        "warmup",
        "name",
    ],
)
def test_bad_workload_option(out, args, names, fix):
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, *args), out, names)
    assert fix in last
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    ("args", "names", "fix"),
    [
        (["--wait", "0", "--warmup", "0"], "--wait/--warmup", ">= 1"),
        (["--active", "0"], "--active", ">= 1"),
        (["--batch-size", "3"], "--batch-size", "after '--'"),
        (["--name", "bad/name"], "--name 'bad/name'", "letters, digits"),
    ],
    ids=["wait-warmup-0", "active-0", "workload-option", "name"],
)
def test_bad_option_with_user_script(out, script, args, names, fix):
    last = assert_cli_error(
        invoke("record", "--out", str(out), "--name", RUN, *args, "--", "python", script), out, names
    )
    assert fix in last


# --- the in-process trials ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names", "fix"),
    [
        (["--try-workers", "-1,x"], "--try-workers", "comma-separated whole numbers >= 0"),
        (["--try-workers", "2,-1"], "--try-workers", "-1 is negative"),
        (["--try-workers", "2,2"], "--try-workers", "give each num_workers once"),
        (["--try-workers", "0,2", "--run-to-end"], "--try-workers with --run-to-end", "drop --run-to-end"),
        (["--try-workers", "0,2", "--trial-steps", "0"], "--trial-steps", "x>=1"),
        (["--try-workers", "0,2", "--trial-rounds", "0"], "--trial-rounds", "x>=1"),
        (["--try-persistent"], "--try-persistent", "add --try-workers"),
        (["--trial-steps", "10"], "--trial-steps", "add --try-workers"),
        (["--max-worker-memory", "2048"], "--max-worker-memory", "add --try-workers"),
        (["--try-workers", "0,2", "--max-worker-memory", "0"], "--max-worker-memory", "a number > 0"),
        (["--try-workers", "0,2", "--max-worker-memory", "nan"], "--max-worker-memory", "a number > 0"),
        (["--then", "best"], "--then best", "add --try-workers"),
        (["--try-workers", "0,2", "--then", "best", "--run-to-end"], "--then best with --run-to-end", "drop --run-to"),
        (["--try-workers", "0,2", "--then", "fastest"], "--then", "'stop', 'best', 'keep'"),
    ],
    ids=[
        "not-numbers",
        "negative",
        "twice",
        "run-to-end",
        "trial-steps-0",
        "rounds-0",
        "persistent-alone",
        "steps-alone",
        "memory-alone",
        "memory-0",
        "memory-nan",
        "then-alone",
        "then-run-to-end",
        "then-unknown",
    ],
)
def test_bad_trial_option(out, script, args, names, fix):
    last = assert_cli_error(
        invoke("record", "--out", str(out), "--name", RUN, *args, "--", "python", script), out, names
    )
    assert fix in last


def test_trials_with_the_built_in_workloads_steps(out):
    """--steps makes the built-in workload train to its end: no steps would be left to try counts in."""
    last = assert_cli_error(
        invoke("record", "--out", str(out), "--name", RUN, "--try-workers", "0,2", "--steps", "100"), out, "--steps 100"
    )
    assert "drop --steps" in last


def test_then_with_the_built_in_workload_needs_its_length(out):
    """--then trains the built-in workload on to its end, which only --steps gives."""
    last = assert_cli_error(
        invoke("record", "--out", str(out), "--name", RUN, "--try-workers", "0,2", "--then", "keep"), out, "--then keep"
    )
    assert "--steps N" in last


# --- the command after '--' -----------------------------------------------------------------------


def test_missing_script(tmp_path, out):
    missing = str(tmp_path / "missing.py")
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, "--", "python", missing), out, missing)
    assert "no such script" in last


@pytest.mark.parametrize(
    ("command", "names", "fix"),
    [
        (["no-such-launcher-xyz", "train.py"], "no-such-launcher-xyz", "no such command"),
        (["ls", "-la"], "ls -la", "before any of its processes trained"),
        (["python", "-c", "print(1)"], "python -c print(1)", "before any of its processes trained"),
        (["python", "-m"], "-m", "add the module name"),
        (["python", "-u"], "python -u", "add the path of your training script"),
    ],
    ids=["unknown-command", "never-trains", "code-string-never-trains", "no-module", "no-script"],
)
def test_bad_command(out, command, names, fix):
    last = assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, "--", *command), out, names)
    assert fix in last


def test_nothing_after_double_dash(out, monkeypatch):
    """Click drops a bare trailing '--'; ``dlprof record --`` must still be an error, not run the
    built-in workload (intercepted here, so a regression stays fast)."""
    real_record, built_in_runs = record_module.record, []

    def guarded(request):
        if request.command[:3] == ("python", "-m", "dlprof.workloads.lora"):
            built_in_runs.append(request.command)
            raise RecordError("the built-in workload was started")
        return real_record(request)

    monkeypatch.setattr(record_module, "record", guarded)
    result = invoke("record", "--out", str(out), "--name", RUN, "--")
    assert not built_in_runs, "'dlprof record --' with no command ran the built-in workload"
    assert_cli_error(result, out, "--")


def test_name_that_holds_a_trace_is_left_untouched(out, script):
    run_dir = out / "taken"
    run_dir.mkdir(parents=True)
    existing = run_dir / "host_1.2.pt.trace.json.gz"
    existing.write_bytes(b"not really gzip, but precious")
    result = invoke("record", "--out", str(out), "--name", "taken", "--", "python", script)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    last = assert_one_line_error(result.stderr, result.output, str(run_dir))
    assert "--name" in last
    assert sorted(run_dir.iterdir()) == [existing]  # no scratch directory either
    assert existing.read_bytes() == b"not really gzip, but precious"


def test_active_out_of_range_names_active(out):
    """``--active -5`` names --active, not the --steps that plan() would derive from it."""
    assert_cli_error(invoke("record", "--out", str(out), "--name", RUN, "--active", "-5"), out, "--active")


@pytest.mark.slow
def test_negative_wait_is_one_line(out, script):
    """A negative --wait is refused before the training process starts (torch.profiler.schedule
    would fail inside it with an AssertionError)."""
    result = invoke("record", "--out", str(out), "--name", RUN, "--wait", "-1", "--warmup", "3", "--", "python", script)
    assert_cli_error(result, out, "--wait")


# --- a script that fails at once (a real subprocess) ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ('raise SystemExit("bad config")\n', "the script exited: bad config"),
        ("import dlprof_no_such_module_xyz\n", "ModuleNotFoundError: No module named 'dlprof_no_such_module_xyz'"),
    ],
    ids=["system-exit", "import-error"],
)
def test_script_that_fails_at_once(tmp_path, out, source, reason):
    script = tmp_path / "broken.py"
    script.write_text(source)
    done = run_dlprof("record", "--out", str(out), "--name", RUN, "--", "python", str(script), timeout=120)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dlprof: error: ") and str(script) in last
    assert reason in last and "failed before the profiler recorded a step" in last
    assert "Traceback" not in done.stdout
    assert_no_run_left(out)


# --- traces that broke the reader (issue 14): dlprof analyze, diff and --redact -------------------------------------

TINY_TRACE = DATA_DIR / "tiny_dlprof_trace.json"
#: How a report must never print a number (tests/test_fuzz_analyze.py's rule).
NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?!\w)", re.IGNORECASE)
ANALYZE_AND_DIFF = [["analyze"], ["analyze", "--redact"], ["diff"], ["diff", "--redact"]]


def _deep_trace(tmp_path: Path, depth: int, where: str, gzipped: bool) -> Path:
    """The tiny trace with JSON nested ``depth`` levels deep: the whole document, in an event's ``args``, or in the
    manifest (``clock``, which ``--redact`` reads)."""
    nested = "[" * depth + "]" * depth
    if where == "document":
        text = nested
    else:
        document = json.loads(TINY_TRACE.read_text())
        if where == "manifest":
            document["dlprof"]["clock"] = {"deep": "@DEEP@"}
        else:
            next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")["args"] = {"deep": "@DEEP@"}
        text = json.dumps(document).replace('"@DEEP@"', nested)
    path = tmp_path / ("deep.json.gz" if gzipped else "deep.json")
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    return path


def _run(command: list[str], path: Path, *options: str):
    """``dlprof analyze PATH`` or ``dlprof diff PATH TINY`` with ``command``'s options."""
    return invoke(command[0], str(path), *([str(TINY_TRACE)] if command[0] == "diff" else []), *command[1:], *options)


@pytest.mark.parametrize("command", ANALYZE_AND_DIFF, ids=" ".join)
@pytest.mark.parametrize(
    ("depth", "where", "gzipped"),
    [(1_000, "args", False), (1_000, "document", False), (100_000, "args", True), (100_000, "document", False)],
    ids=["1000-args", "1000-document", "100000-args-gzip", "100000-document"],
)
def test_a_trace_nested_too_deep_is_one_line(tmp_path, command, depth, where, gzipped):
    path = _deep_trace(tmp_path, depth, where, gzipped)
    result = _run(command, path)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    last = assert_one_line_error(result.stderr, result.output, str(path))
    assert last == (
        f"dlprof: error: {path}: JSON nested too deep to read (more than Python's recursion limit allows, about"
        f" {sys.getrecursionlimit()} levels; a profiler's trace nests fewer than 10); record the trace again, or give"
        " the file torch.profiler wrote"
    )


@pytest.mark.parametrize("command", ANALYZE_AND_DIFF, ids=" ".join)
@pytest.mark.parametrize("where", ["args", "manifest"])
def test_a_trace_nested_hundreds_of_levels_is_reported(tmp_path, command, where):
    """Within the parser's reach, a deep value in an event is never walked, and one in the manifest is read as unknown
    (``--redact`` walks the manifest)."""
    result = _run(command, _deep_trace(tmp_path, 500, where, gzipped=False))
    assert result.exit_code == 0, result.output
    title = "dlprof analyze: " if command[0] == "analyze" else "dlprof diff: "
    # The title follows the headline, the verdict and the findings.
    assert any(line.startswith(title) for line in result.stdout.splitlines()[:20])
    if command[0] == "analyze" and where == "manifest":
        assert "  - manifest.clock is nested more than 32 levels deep: read as unknown" in result.stdout.splitlines()


#: Every format of each command (dlprof diff has no HTML).
COMMAND_FORMATS = [
    (c, f) for c in ANALYZE_AND_DIFF for f in ("text", "markdown", "json", "html")[: 4 - (c[0] == "diff")]
]


@pytest.mark.parametrize(("command", "fmt"), COMMAND_FORMATS, ids=[f"{' '.join(c)}-{f}" for c, f in COMMAND_FORMATS])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_manifest_number_given_as_nan_text_never_prints_nan(tmp_path, command, fmt, value):
    """``steps.run`` (and every other number of the manifest: tests/test_manifest.py) given as the text "NaN" is read
    as unknown, and the report says so without printing NaN, in every format."""
    document = json.loads(TINY_TRACE.read_text())
    document["dlprof"]["steps"]["run"] = value
    document["dlprof"]["host"]["usable_cores"] = value
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document))
    result = _run(command, path, "--format", fmt)
    assert result.exit_code == 0, result.output
    found = NOT_A_NUMBER.search(html.unescape(result.stdout))
    assert found is None, f"{found.group(0)!r} in the {fmt} report"
    if command[0] == "analyze" and fmt == "text":
        lines = result.stdout.splitlines()
        for field in ("steps.run", "host.usable_cores"):
            assert f"  - manifest.{field} is text naming a non-finite number, not a valid int: read as unknown" in lines


def test_a_dataset_nested_too_deep_is_one_line(tmp_path, out):
    for name, text, where in [
        ("deep.json", "[" + "[" * 100_000 + "]" * 100_000 + "]", ""),
        ("deep.jsonl", '{"a": ' * 5_000 + "1" + "}" * 5_000 + "\n", " line 1:"),
    ]:
        dataset = tmp_path / name
        dataset.write_text(text)
        last = assert_cli_error(
            invoke("record", "--out", str(out), "--name", RUN, "--dataset", str(dataset)), out, str(dataset)
        )
        assert last == (
            f"dlprof: error: {dataset}:{where} JSON nested too deep to read (more than Python's recursion limit"
            ' allows); give each record as one object of texts, such as {"instruction": ..., "output": ...}'
        )
