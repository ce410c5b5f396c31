"""``--redact``: reports and traces safe to post (dlprof/core/redact.py), and reports that never hold dataset text."""

from __future__ import annotations

import getpass
import gzip
import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest
from conftest import DATA_DIR, invoke, run_dlprof, trace_files

from dlprof.core.redact import ARG, HOME, HOST, PATH, USER, Redactor, for_run

FORMATS = ("text", "markdown", "json", "html")
#: This checkout: ``python -m dlprof`` run from another directory must import it, not an installed dlprof.
REPO = Path(__file__).resolve().parents[1]


def _occurs(original: str, text: str) -> bool:
    """Whether ``original`` is in ``text`` as a whole word (not inside a longer one: host ``vm`` in ``kvm``)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(original)}(?![A-Za-z0-9])", text) is not None


def _shown(report: str) -> str:
    """A report without the HTML page's style sheet: its CSS (``:root``) is no user's name, whatever the user is
    called."""
    return re.sub(r"<style>.*?</style>", "", report, flags=re.S)


def _local_originals() -> list[str]:
    """This machine's host name, user name and home directory."""
    originals = [socket.gethostname(), str(Path.home())]
    try:
        originals.append(getpass.getuser())
    except (KeyError, OSError):
        pass
    return [o for o in originals if len(o) > 1]


# --------------------------------------------------------------------------------- the Redactor


def test_same_original_same_placeholder():
    r = Redactor()
    assert r.add("gpu-node-7", HOST) == "[host-1]"
    assert r.add("gpu-node-8", HOST) == "[host-2]"
    assert r.add("gpu-node-7", HOST) == "[host-1]"
    assert (
        r.redact("gpu-node-8 then gpu-node-7, gpu-node-7_123.456.pt.trace.json")
        == "[host-2] then [host-1], [host-1]_123.456.pt.trace.json"
    )
    assert r.host_label("gpu-node-7") == "host-1"  # for a file name: no brackets


def test_longest_first_and_home_path():
    r = Redactor()
    r.add("/home/alice", HOME)
    r.add("alice", USER)
    r.add_argv(["python", "/home/alice/proj/train.py", "--dataset", "/home/alice/data/corpus.jsonl"])
    text = r.redact(
        "/home/alice/data/corpus.jsonl and /home/alice/notes.txt, /home/alice, pytest-of-alice,"
        " /home/alice/proj/util.py"
    )
    # The whole argument is one placeholder (path-2 is the script's directory), a home path elsewhere ~, the user name
    # [user].
    assert text == "[path-3] and ~/notes.txt, ~, pytest-of-[user], [path-2]/util.py"
    assert r.redact("malice alicent /home/alicex") == "malice alicent /home/alicex"  # never inside a longer word


def test_options_numbers_and_common_words_kept():
    r = Redactor()
    r.add_argv(
        [
            "python",
            "-m",
            "mypkg.train",
            "--lr",
            "1e-4",
            "--steps",
            "100000",
            "--device",
            "cpu",
            "--offset",
            "-1",
            "--run-tag=marmot-velvet",
            "--model",
            "qwen-secret",
            "--verbose",
            "cfg.yaml",
            "--name",
            "r",
        ]
    )
    kinds = {original: placeholder.strip("[]").split("-")[0] for original, placeholder in r.placeholders.items()}
    assert kinds == {"mypkg.train": ARG, "marmot-velvet": ARG, "qwen-secret": PATH, "cfg.yaml": PATH}
    text = (
        "--lr 1e-4 --steps 100000 on cpu, offset -1, --verbose; marmot-velvet with qwen-secret and cfg.yaml; step"
        " 1.5 ms"
    )
    assert (
        r.redact(text)
        == "--lr 1e-4 --steps 100000 on cpu, offset -1, --verbose; [arg-2] with [path-1] and [path-2]; step 1.5 ms"
    )


def test_relative_path_also_absolute_and_script_directory():
    r = Redactor()
    r.add_argv(["python", "train.py", "--data", "data/x.json"], cwd="/srv/acme/proj")
    redacted = r.redact(
        "/srv/acme/proj/train.py(12): <module>; /srv/acme/proj/model.py(3): f; /srv/acme/proj/data/x.json; data/x.json"
    )
    assert "acme" not in redacted and "x.json" not in redacted and "train.py" not in redacted
    assert "model.py" in redacted  # the directory is hidden, not the module's name


def test_placeholders_are_not_redacted_again():
    r = for_run(
        [{"host": {"hostname": "[host-1]"}, "command": ["[path-1]", "record", "[arg-1]"]}],
        trace_names=["host-1_42.1700.pt.trace.json.gz"],
        local=False,
    )
    assert r.placeholders == {}


def test_json_keys_numbers_and_layout_kept():
    r = Redactor()
    r.add("steps", ARG)  # a value that is also a key of the report
    r.add("/home/bob", HOME)
    text = json.dumps(
        {"steps": {"count": 3, "name": "steps"}, "trace_file": "/home/bob/x.json", "q": 'a "steps" b'}, indent=2
    )
    redacted = r.redact_json(text)
    assert json.loads(redacted) == {
        "steps": {"count": 3, "name": "[arg-1]"},
        "trace_file": "~/x.json",
        "q": 'a "[arg-1]" b',
    }
    assert len(redacted.splitlines()) == len(text.splitlines())


def test_html_markup_kept():
    r = Redactor()
    r.add("rect", ARG)
    r.add("/srv/a&b", PATH)
    page = (
        '<style>rect { fill: red }</style><svg><rect class="rect" title="/srv/a&amp;b/x"/></svg><p>rect at'
        " /srv/a&amp;b/y</p>"
    )
    assert (
        r.redact_html(page)
        == '<style>rect { fill: red }</style><svg><rect class="[arg-1]" title="[path-1]/x"/></svg><p>[arg-1] at'
        " [path-1]/y</p>"
    )


def test_redact_value_in_place():
    r = Redactor()
    r.add("gpu-node-7", HOST)
    document = {
        "dlprof": {"host": {"hostname": "gpu-node-7", "usable_cores": 8}},
        "traceEvents": [{"name": "thread gpu-node-7", "ts": 1.5, "args": {"x": ["gpu-node-7"]}}],
    }
    assert r.redact_value(document) is document
    assert document == {
        "dlprof": {"host": {"hostname": "[host-1]", "usable_cores": 8}},
        "traceEvents": [{"name": "thread [host-1]", "ts": 1.5, "args": {"x": ["[host-1]"]}}],
    }
    manifest = {"command": ("gpu-node-7", "--lr", "1e-4")}  # Manifest.to_dict() keeps tuples
    assert r.redact_value(manifest) == {"command": ["[host-1]", "--lr", "1e-4"]}


def test_local_host_user_and_home():
    r = for_run(local=True)
    for original in _local_originals():
        assert not _occurs(original, r.redact(f"on {original}/x and {original}_12")), original


@pytest.mark.parametrize("command", ["record", "sweep", "analyze", "diff"])
def test_redact_option_offered(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "--redact" in result.stdout


def test_sweep_request_carries_redact(tmp_path):
    """``sweep`` shares ``--redact`` with ``record`` (``record_options``): the request it builds asks for redacted
    traces."""
    from dlprof.workflows.record import record_request

    request = record_request(
        out_dir=tmp_path,
        name="s",
        wait=1,
        warmup=1,
        active=2,
        reference_steps=0,
        run_to_end=False,
        loader_spans=True,
        command=("python", "train.py"),
        cli_argv=("dlprof", "sweep"),
        name_prefix="sweep-",
        redact=True,
    )
    assert request.redact is True


# ------------------------------------------------------------------------------ dlprof analyze --redact

_PLANTED_HOST = "gpu-node-17.acme-corp.example"
_PLANTED = ("gpu-node-17", "acme-corp", "alicia", "proj-falcon", "corpus-2024", "qwen-secret", "marmot-velvet")


def _planted_run(tmp_path: Path) -> Path:
    """tests/data/tiny_dlprof_trace.json with a host name, a user's home paths and dataset paths in its manifest and
    file name."""
    run_dir = tmp_path / "proj-falcon-traces" / "run1"
    run_dir.mkdir(parents=True)
    document = json.loads((DATA_DIR / "tiny_dlprof_trace.json").read_text())
    manifest = document["dlprof"]
    manifest["host"]["hostname"] = _PLANTED_HOST
    manifest["host"]["platform"] = f"Linux-6.1-x86_64 on {_PLANTED_HOST}"
    manifest["command"] = [
        "/home/alicia/venv/bin/dlprof",
        "record",
        "--out",
        str(run_dir.parent),
        "--",
        "python",
        "/home/alicia/proj-falcon/train.py",
        "--dataset",
        "/mnt/data/corpus-2024.jsonl",
        "--model",
        "/home/alicia/models/qwen-secret",
        "--run-tag",
        "marmot-velvet",
        "--lr",
        "1e-4",
    ]
    manifest["script"] = manifest["command"][5:]
    manifest["process_argv"] = manifest["script"]
    (run_dir / "gpu-node-17_4242.1700000000000.pt.trace.json").write_text(json.dumps(document))
    return run_dir


def test_analyze_redact_every_format(tmp_path):
    run_dir = _planted_run(tmp_path)
    plain = invoke("analyze", run_dir, "--format", "text")
    assert plain.exit_code == 0, plain.output
    assert "gpu-node-17" in plain.stdout and "proj-falcon" in plain.stdout  # the test plants what a report shows
    originals = [*_PLANTED, *_local_originals()]
    for fmt in FORMATS:
        result = invoke("analyze", run_dir, "--format", fmt, "--redact")
        assert result.exit_code == 0, result.output
        for original in originals:
            assert not _occurs(original, _shown(result.stdout)), f"{fmt}: {original!r} in the redacted report"
        assert fmt == "markdown" or "[host-" in result.stdout, fmt  # Markdown names no trace file
        if fmt == "json":
            report = json.loads(result.stdout)
            assert report["steps"]["count"] == 2 and report["run"]["usable_cores"] == 4  # numbers kept
    out = tmp_path / "report.md"
    result = invoke("analyze", run_dir, "--redact", "-o", out)
    assert result.exit_code == 0, result.output
    assert not any(_occurs(o, out.read_text()) for o in originals)


def test_diff_redact_every_format(tmp_path):
    before = _planted_run(tmp_path)
    after = before.parent / "run2"
    shutil.copytree(before, after)
    [trace] = after.iterdir()
    document = json.loads(trace.read_text())
    document["dlprof"]["script"] = [*document["dlprof"]["script"][:-1], "2e-4"]  # a changed --lr: the command is shown
    trace.write_text(json.dumps(document))
    plain = invoke("diff", before, after)
    assert plain.exit_code == 0, plain.output
    # What the test plants is in a diff: the host in the trace file's name, the home path in the command line.
    assert "gpu-node-17" in plain.stdout and "/home/alicia" in plain.stdout and "proj-falcon" in plain.stdout
    originals = [*_PLANTED, *_local_originals()]
    for fmt in ("text", "markdown", "json"):
        result = invoke("diff", before, after, "--format", fmt, "--redact")
        assert result.exit_code == 0, result.output
        for original in originals:
            assert not _occurs(original, result.stdout), f"{fmt}: {original!r} in the redacted diff"
        assert "[host-" in result.stdout and "[path-" in result.stdout, fmt
        if fmt == "json":
            assert json.loads(result.stdout)["rows"][0]["a"] == 0.9  # numbers kept
    out = tmp_path / "diff.md"
    assert invoke("diff", before, after, "--redact", "-o", out).exit_code == 0
    assert not any(_occurs(o, out.read_text()) for o in originals)


# --------------------------------------------------------------------- reports never hold dataset text


def _dataset_strings() -> list[str]:
    """Instructions and responses of the shipped dataset, long enough not to occur by chance."""
    records = json.loads((REPO / "dlprof" / "workloads" / "data" / "self_cognition.json").read_text())
    found = {str(v) for record in records for v in record.values() if isinstance(v, str) and len(v) >= 12}
    return sorted(found)


@pytest.mark.slow
def test_reports_never_include_dataset_text(workload_run_2):
    strings = _dataset_strings()
    assert len(strings) > 100
    for fmt in FORMATS:
        result = invoke("analyze", workload_run_2, "--format", fmt)
        assert result.exit_code == 0, result.output
        leaked = [s for s in strings if s in result.stdout]
        assert not leaked, f"{fmt} report holds dataset text: {leaked[:3]}"
    with gzip.open(trace_files(workload_run_2)[0], "rt", encoding="utf-8") as f:
        trace = f.read()
    assert not [s for s in strings if s in trace]


# ------------------------------------------------------------------------------ dlprof record --redact

_SCRIPT = """\
import argparse, sys
sys.path.insert(0, {launch!r})
import train_simple

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--run-tag")
parser.add_argument("--data")
args = parser.parse_args()
train_simple.main(["--steps", str(args.steps)])
"""


@pytest.mark.slow
def test_record_redact_end_to_end(tmp_path):
    project = tmp_path / "proj-quokka-7731"
    project.mkdir()
    script = project / "train_quokka.py"
    script.write_text(_SCRIPT.format(launch=str(DATA_DIR / "launch")))
    done = run_dlprof(
        "record",
        "--redact",
        "--out",
        "traces",
        "--name",
        "r",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "4",
        "--reference-steps",
        "4",
        "--",
        sys.executable,
        str(script),
        "--steps",
        "100000",
        "--run-tag",
        "marmot-velvet-9",
        "--data",
        "corpus-quokka.jsonl",
        cwd=project,
        timeout=120,
        env={"PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [trace] = trace_files(project / "traces" / "r")
    with gzip.open(trace, "rt", encoding="utf-8") as f:
        text = f.read()
    originals = ["proj-quokka-7731", "marmot-velvet-9", "corpus-quokka", str(tmp_path), *_local_originals()]
    for original in originals:
        assert not _occurs(original, text), f"{original!r} in the redacted trace"
        assert not _occurs(original, trace.name), f"{original!r} in the trace's name {trace.name}"
    assert trace.name.startswith("host-")
    document = json.loads(text)
    manifest = document["dlprof"]
    assert manifest["redacted"] is True and manifest["host"]["hostname"].startswith("[host-")
    assert manifest["steps"]["recorded"] == 4  # numbers kept
    # Still a trace dlprof analyses, and its report stays redacted.
    result = invoke("analyze", project / "traces" / "r", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["steps"]["count"] == 4
    redacted = invoke("analyze", trace, "--redact")
    assert redacted.exit_code == 0 and not any(_occurs(o, redacted.stdout) for o in originals)
