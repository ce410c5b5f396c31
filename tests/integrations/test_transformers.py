"""``dlprof.hf.DlprofCallback`` with a real ``transformers.Trainer``, in this process as in a notebook; and the
Trainer-specific facts it relies on (batch size through accelerate, who created a DataLoader, trainer arguments)."""

from __future__ import annotations

import getpass
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TESTS_DIR, check_recorded_traces, load_trace, trace_files
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from dlprof.capture import probe
from dlprof.capture import session as session_module
from dlprof.core import schema
from dlprof.core.errors import UsageError

SEQ = 32


class RandomTokens(Dataset):
    """Random token ids, made on demand: a dataset of any length costs nothing."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(0, 100, (SEQ,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


@pytest.fixture
def fresh_process(monkeypatch):
    """This test process as a fresh notebook kernel: no session, and none left behind for later tests."""
    from dlprof.integrations import transformers as hf

    monkeypatch.delenv(session_module.SESSION_ENV, raising=False)
    monkeypatch.setattr(session_module, "_SESSION", None)
    monkeypatch.setattr(hf, "_ACTIVE", None)
    # One intra-op thread: on 2 cores shared with a DataLoader worker (and maybe other jobs), more threads
    # spin against each other and a step of this tiny model takes half a second instead of milliseconds.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    if hf._ACTIVE is not None:
        hf._ACTIVE.finish()
    probe.uninstall()


def _trainer(tmp_path, callback, dataset_len: int, max_steps: int, num_workers: int = 1):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=SEQ))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=num_workers,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    return Trainer(model=model, args=args, train_dataset=RandomTokens(dataset_len), callbacks=[callback])


def _no_session_hook_left() -> bool:
    from torch.optim import optimizer as optimizer_module

    return not any(
        isinstance(getattr(h, "__self__", None), session_module.Session)
        for h in optimizer_module._global_optimizer_post_hooks.values()
    )


@pytest.mark.slow
def test_trainer_run_is_recorded_with_its_workers(tmp_path, fresh_process, capsys):
    import dlprof
    from dlprof.hf import DlprofCallback

    callback = DlprofCallback(out_dir=tmp_path, name="hf", wait=1, warmup=1, active=4, reference_steps=4)
    trainer = _trainer(tmp_path, callback, dataset_len=256, max_steps=60)
    trainer.train()
    assert trainer.state.global_step == 60  # trained to its end: the callback stops nothing by default

    run_dir = tmp_path / "hf"
    files = trace_files(run_dir)
    assert len(files) == 1 and callback.result is not None and callback.result.trace_path == files[0]
    assert sorted(p.name for p in run_dir.iterdir()) == [files[0].name]  # scratch gone: nothing HTA would choke on
    check_recorded_traces(run_dir)  # the callback's merge, like dlprof record's: nested on every thread, tracks named
    out = capsys.readouterr().out
    assert f"dlprof: trace {files[0]}" in out and "4 steps recorded" in out

    document = load_trace(run_dir)
    manifest = document[schema.MANIFEST_KEY]
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert manifest["steps"]["recorded"] == 4 and manifest["schedule"]["step_mode"] == "optimizer"
    assert manifest["workers"], "the Trainer's DataLoader worker was not seen"
    assert any(e.get("cat") == schema.CATEGORY and e.get("name") == schema.SPAN_BATCH for e in document["traceEvents"])
    assert manifest["loader"]["num_workers"] == 1
    assert manifest["loader"]["batch_size"] == 4  # accelerate's DataLoader has a batch_sampler: the size comes from it
    assert manifest["loader"]["created_by"] == "transformers"
    assert manifest["memory"], "no memory samples"

    advice = dlprof.analyze(run_dir).runs[0].advice
    assert advice.trainer_arguments is not None and advice.trainer_arguments.startswith("--dataloader_num_workers ")
    # When training ends, the callback prints the report's answer.
    assert advice.headline is not None and f"\ndlprof: {advice.headline.text}\n" in out

    # The process is left as it was: no probe, no optimizer hook, no signal handler, no session recording.
    assert not hasattr(DataLoader.__init__, "_dlprof_original")
    assert _no_session_hook_left()
    assert (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    # One callback records one train(): a second one is refused before it trains, with the fix.
    with pytest.raises(UsageError, match="recorded one train"):
        trainer.train()
    assert trace_files(run_dir) == files


@pytest.mark.slow
def test_stop_after_window_stops_the_trainer(tmp_path, fresh_process):
    from dlprof.hf import DlprofCallback

    callback = DlprofCallback(
        out_dir=tmp_path, name="stop", wait=1, warmup=1, active=3, reference_steps=3, stop_after_window=True
    )
    # Epochs longer than the recorder crosses whole (400 batches): it is done after the reference steps.
    trainer = _trainer(tmp_path, callback, dataset_len=4 * 500, max_steps=1000, num_workers=0)
    trainer.train()
    assert trainer.state.global_step < 20
    manifest = load_trace(tmp_path / "stop")[schema.MANIFEST_KEY]
    assert manifest["status"] == "complete" and manifest["stopped_early"] is True
    assert manifest["steps"]["recorded"] == 3
    assert manifest["loader"]["num_workers"] == 0 and manifest["loader"]["created_by"] == "transformers"


@pytest.mark.slow
def test_an_interrupted_train_leaves_a_partial_trace(tmp_path, fresh_process):
    from transformers import TrainerCallback

    from dlprof.hf import DlprofCallback

    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 8:
                raise KeyboardInterrupt  # Ctrl-C in a notebook: on_train_end never comes

    callback = DlprofCallback(out_dir=tmp_path, name="cut", wait=1, warmup=1, active=3, reference_steps=3)
    trainer = _trainer(tmp_path, callback, dataset_len=256, max_steps=60, num_workers=0)
    trainer.add_callback(Interrupt())
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert callback.result is None and trace_files(tmp_path / "cut") == []
    result = callback.finish()
    assert result is not None and result.status == "partial" and "interrupted" in result.error
    manifest = load_trace(tmp_path / "cut")[schema.MANIFEST_KEY]
    assert manifest["status"] == "partial" and manifest["steps"]["recorded"] == 3
    assert callback.finish() is result and _no_session_hook_left()


def _occurs(original: str, text: str) -> bool:
    """Whether ``original`` is in ``text`` as a whole word (not inside a longer one: host ``vm`` in ``kvm``)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(original)}(?![A-Za-z0-9])", text) is not None


@pytest.mark.slow
def test_redact_writes_the_trace_as_dlprof_record_redact_does(tmp_path, fresh_process):
    from dlprof.hf import DlprofCallback

    out = tmp_path / "proj-wombat-5521"
    callback = DlprofCallback(out_dir=out, name="r", wait=1, warmup=1, active=3, reference_steps=3, redact=True)
    _trainer(tmp_path, callback, dataset_len=128, max_steps=12, num_workers=0).train()
    [trace] = trace_files(out / "r")
    assert trace.name.startswith("host-") and callback.result.trace_path == trace
    with gzip.open(trace, "rt", encoding="utf-8") as f:
        text = f.read()
    originals = [socket.gethostname(), str(Path.home()), "proj-wombat-5521", str(tmp_path)]
    try:
        originals.append(getpass.getuser())
    except (KeyError, OSError):
        pass
    for original in (o for o in originals if len(o) > 1):
        assert not _occurs(original, text), f"{original!r} in the redacted trace"
    manifest = json.loads(text)[schema.MANIFEST_KEY]
    assert manifest["redacted"] is True and manifest["host"]["hostname"].startswith("[host-")
    assert manifest["steps"]["recorded"] == 3 and "redact=True" in manifest["command"]  # numbers kept
    typed = callback.result.manifests[0]  # the result holds the manifest as written
    assert typed.redacted and typed.host.hostname == manifest["host"]["hostname"]


_TRAIN_WITHOUT_A_NAME = """
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from dlprof.hf import DlprofCallback


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        ids = torch.randint(0, 100, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
torch.set_num_threads(1)
callback = DlprofCallback(out_dir=sys.argv[1], wait=1, warmup=1, active=2, reference_steps=2)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16))
args = TrainingArguments(
    output_dir=sys.argv[2], max_steps=8, per_device_train_batch_size=4, report_to=[], use_cpu=True,
    save_strategy="no", logging_strategy="no", disable_tqdm=True,
)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback]).train()
"""


@pytest.mark.slow
def test_a_script_name_that_is_no_run_name_is_cleaned(tmp_path):
    """``DlprofCallback()`` without ``name=`` in ``my träin (v2).py``: the run is named as ``dlprof record`` would."""
    script = tmp_path / "my träin (v2).py"
    script.write_text(_TRAIN_WITHOUT_A_NAME, encoding="utf-8")
    out = tmp_path / "traces"
    repo = str(TESTS_DIR.parent)
    done = subprocess.run(
        [sys.executable, str(script), str(out), str(tmp_path / "trainer-out")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (repo, os.environ.get("PYTHONPATH"))))},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = out.iterdir()
    assert re.fullmatch(r"my_tr_in_v2-\d{8}-\d{6}", run_dir.name), run_dir.name
    [trace] = trace_files(run_dir)
    assert f"dlprof: trace {trace}" in done.stdout
    assert load_trace(run_dir)[schema.MANIFEST_KEY]["steps"]["recorded"] == 2


def test_a_newer_callback_replaces_one_that_never_trained(tmp_path, fresh_process):
    from dlprof.hf import DlprofCallback

    first = DlprofCallback(out_dir=tmp_path, name="first")
    assert (tmp_path / "first" / schema.SCRATCH_DIR / "config.json").exists()
    assert hasattr(DataLoader.__init__, "_dlprof_original")  # DataLoaders made from now on are instrumented
    second = DlprofCallback(out_dir=tmp_path, name="second")  # re-running a notebook cell
    assert not (tmp_path / "first").exists()
    with pytest.raises(UsageError, match="replaced"):
        first.on_train_begin(None, None, None)
    assert second.finish() is None  # never trained: dropped, nothing left
    assert not (tmp_path / "second").exists()
    assert not hasattr(DataLoader.__init__, "_dlprof_original") and _no_session_hook_left()


def test_bad_arguments_are_one_clear_error_and_leave_nothing(tmp_path, fresh_process):
    from dlprof.hf import DlprofCallback

    with pytest.raises(UsageError, match="name='bad name'"):
        DlprofCallback(out_dir=tmp_path, name="bad name")
    with pytest.raises(UsageError, match="active"):
        DlprofCallback(out_dir=tmp_path, name="x", active=0)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / ("h_1.2" + schema.TRACE_SUFFIX)).write_bytes(b"")
    with pytest.raises(UsageError, match="already holds a recorded run"):
        DlprofCallback(out_dir=tmp_path, name="done")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done"]


def test_under_dlprof_record_the_callback_does_nothing(tmp_path, fresh_process, monkeypatch, capsys):
    from dlprof.hf import DlprofCallback

    monkeypatch.setattr(
        session_module, "_SESSION", session_module.Session(tmp_path / "session", {})
    )  # armed by dlprof record
    callback = DlprofCallback(out_dir=tmp_path, name="inside")
    assert callback.run_dir is None and not (tmp_path / "inside").exists()
    assert "dlprof record is recording this process already" in capsys.readouterr().err
    callback.on_train_begin(None, None, None)
    callback.on_train_end(None, None, None)
    assert callback.finish() is None


def test_default_name_is_the_script_and_the_time(tmp_path, monkeypatch):
    import time

    from dlprof.integrations import transformers as hf

    monkeypatch.setattr(sys, "argv", ["/somewhere/train_model.py", "--lr", "1"])
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(time, "strftime", lambda fmt: "20260101-120000")
    assert hf._default_name(tmp_path) == "train_model-20260101-120000"
    (tmp_path / "train_model-20260101-120000").mkdir()
    assert hf._default_name(tmp_path) == "train_model-20260101-120000-2"
    monkeypatch.setattr(sys, "argv", ["/somewhere/my träin (v2).py"])  # cleaned as dlprof record cleans it
    assert hf._default_name(tmp_path) == "my_tr_in_v2-20260101-120000"
    monkeypatch.setattr(sys, "argv", ["/somewhere/package/__main__.py"])  # python -m package
    assert hf._default_name(tmp_path) == "package-20260101-120000"
    monkeypatch.setattr(sys, "argv", [""])  # an interactive interpreter
    assert hf._default_name(tmp_path) == "trainer-20260101-120000"
    monkeypatch.setitem(sys.modules, "ipykernel", sys)  # in Jupyter
    assert hf._default_name(tmp_path) == "notebook-20260101-120000"


def test_batch_size_comes_from_the_batch_sampler(monkeypatch):
    loader = DataLoader(
        RandomTokens(8), batch_sampler=BatchSampler(SequentialSampler(range(8)), batch_size=3, drop_last=False)
    )
    assert loader.batch_size is None
    assert probe.settings.loader_config(loader)["batch_size"] == 3


def test_created_by_names_the_framework_on_the_stack():
    def made_in(*modules: str) -> str | None:
        """Build a DataLoader from inside functions of these modules (outermost first), as a framework would."""
        build = lambda: probe.settings.loader_config(DataLoader(RandomTokens(4)))["created_by"]
        for module in reversed(modules):
            scope = {"__name__": module, "inner": build}
            exec("def make():\n    return inner()\n", scope)
            build = scope["make"]
        return build()

    assert made_in() is None
    assert made_in("__main__") is None
    assert made_in("transformers.trainer") == "transformers"
    assert made_in("transformers.trainer_seq2seq") == "transformers"
    assert made_in("swift.llm.train.sft", "transformers.trainer") == "ms-swift"
    assert made_in("llamafactory.train.sft.workflow", "transformers.trainer") == "llamafactory"
    assert made_in("swiftly") is None and made_in("transformers.modeling_utils") is None
