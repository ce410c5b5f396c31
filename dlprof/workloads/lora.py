"""The built-in workload: a LoRA fine-tune (peft) of a causal LM (transformers), fully offline.

``dlprof record`` with no command runs ``python -m dlprof.workloads.lora ARGS`` under the same
capture mechanism as any user script. By default the model is a tiny Qwen2-architecture model built
from a config with random weights, the tokenizer a byte-level BPE shipped in the package, and the
data a bundled Chinese/English self-cognition set; ``--model``, ``--tokenizer`` and ``--dataset``
take local files instead. Nothing is ever downloaded.

Importing this module imports no torch: :func:`check` runs in ``dlprof record`` before it starts
anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast

from dlprof.core.errors import InputError, UsageError
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, MAX_REFERENCE_FACTOR, Schedule, whole_epochs_to_time
from dlprof.workloads.records import load_examples

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_DATASET = DATA_DIR / "self_cognition.json"
DEFAULT_TOKENIZER = DATA_DIR / "tokenizer.json"
DEVICES = ("auto", "cpu", "cuda")

# The tiny default model: Qwen2's architecture at a size that trains in milliseconds a step on two CPU cores
# (docs/ARCHITECTURE.md#facts-the-code-relies-on), so the default record takes seconds, not minutes.
TINY_HIDDEN_SIZE = 64
TINY_INTERMEDIATE_SIZE = 256
TINY_LAYERS = 2
TINY_HEADS = 4
TINY_KV_HEADS = 2
# LoRA as commonly used for instruction tuning; "all-linear" adapts every linear layer but the head,
# whatever a local model names its projections.
LORA_RANK = 8
LORA_ALPHA = 16
LORA_DROPOUT = 0.05
LEARNING_RATE = 2e-4
#: Steps recorded when neither --steps nor --active is given: enough for stable medians, few enough
#: that the default record takes seconds.
DEFAULT_ACTIVE_STEPS = 20
#: Read the loss back (a device sync) only this often, as a training loop that logs every N steps does.
LOSS_EVERY_STEPS = 10


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """Options of the built-in workload (``dlprof record --help`` documents each)."""

    model: str | None = None
    dataset: str | None = None
    tokenizer: str | None = None
    batch_size: int = 4
    max_length: int = 512
    steps: int = 25
    num_workers: int = 2
    pin_memory: bool | None = None  # None: on when training on CUDA
    prefetch_factor: int | None = None  # None: PyTorch's default (2) when num_workers > 0
    persistent_workers: bool = False
    device: str = "auto"
    seed: int = 0
    #: CPU time added to tokenizing each sample (ms), spent inside the tokenizer calls: a slow tokenizer.
    tokenizer_cost_ms: float = 0.0
    #: Pad every batch to ``max_length`` (``padding="max_length"``), not to its longest example.
    pad_to_max_length: bool = False
    #: Write the measured speed here (JSON): steps/s over whole epochs and the steady median step.
    report: str | None = None

    def to_argv(self) -> list[str]:
        """Command-line arguments that :func:`parse_args` turns back into these options."""
        argv = []
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None or (field.name in ("tokenizer_cost_ms", "pad_to_max_length") and not value):
                continue
            flag = "--" + field.name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + field.name.replace("_", "-"))
            else:
                argv += [flag, str(value)]
        return argv


#: Help for the options whose meaning the name does not tell (`dlprof record --help` documents the rest).
OPTION_HELP = {
    "tokenizer_cost_ms": (
        "CPU time (ms) added to tokenizing each sample, inside the tokenizer calls: a slow tokenizer "
        "(the regime where tokenizing in the DataLoader dominates) [default: 0]"
    ),
    "pad_to_max_length": "pad every batch to --max-length (padding='max_length'), not to its longest example",
    "report": (
        "write the measured speed to this JSON file: steps_per_s_epochs (over whole epochs after the first, worker"
        " restarts included), steps_per_s_steady (steps over time inside the epochs after the first, each epoch's"
        " start-up left out), epochs, steps_per_epoch, and every step's wall time and data wait (ms)"
    ),
}


def parse_args(argv: list[str]) -> WorkloadOptions:
    parser = argparse.ArgumentParser(prog="python -m dlprof.workloads.lora", description=__doc__.splitlines()[0])
    defaults = WorkloadOptions()
    for field in fields(WorkloadOptions):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        help_text = OPTION_HELP.get(field.name)
        if field.type in ("bool", "bool | None"):
            parser.add_argument(
                flag, dest=field.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        elif field.name in ("model", "dataset", "tokenizer", "device", "report"):
            parser.add_argument(flag, dest=field.name, default=default, help=help_text)
        elif field.type == "float":
            parser.add_argument(flag, dest=field.name, type=float, default=default, help=help_text)
        else:
            parser.add_argument(flag, dest=field.name, type=int, default=default, help=help_text)
    return WorkloadOptions(**vars(parser.parse_args(argv)))


def check(options: WorkloadOptions) -> None:
    """Reject options and inputs that cannot work, before anything starts.

    Raises:
        UsageError: an option out of range or options that contradict each other.
        InputError: a dataset, model or tokenizer path that cannot be used.
    """
    for name, low in (("batch_size", 1), ("max_length", 8), ("steps", 1), ("num_workers", 0)):
        value = getattr(options, name)
        if value < low:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be >= {low}")
    if not options.tokenizer_cost_ms >= 0:  # also rejects NaN
        raise UsageError(
            f"--tokenizer-cost-ms {options.tokenizer_cost_ms}: must be >= 0 (CPU ms added to tokenizing each sample)"
        )
    if options.report is not None and not Path(options.report).resolve().parent.is_dir():
        raise InputError(f"{options.report}: its folder does not exist; create it or write the report elsewhere")
    if options.device not in DEVICES:
        raise UsageError(f"--device {options.device}: unknown device; use one of {', '.join(DEVICES)}")
    if options.num_workers == 0 and options.prefetch_factor is not None:
        raise UsageError(
            "--prefetch-factor: only applies with worker processes; add --num-workers 1 or more, or drop it"
        )
    if options.prefetch_factor is not None and options.prefetch_factor < 1:
        raise UsageError(f"--prefetch-factor {options.prefetch_factor}: must be >= 1")
    if options.num_workers == 0 and options.persistent_workers:
        raise UsageError(
            "--persistent-workers: only applies with worker processes; add --num-workers 1 or more, or drop it"
        )
    if options.model is not None:
        model = Path(options.model)
        if not model.is_dir():
            raise InputError(
                f"{model}: no such model directory; give a local Hugging Face model directory, or leave --model out for"
                " the built-in tiny model"
            )
        if not (model / "config.json").is_file():
            raise InputError(
                f"{model}: no config.json in this directory; give a Hugging Face model directory (config.json and"
                " weights)"
            )
    if options.tokenizer is not None and not Path(options.tokenizer).exists():
        raise InputError(
            f"{options.tokenizer}: no such tokenizer file or directory; give a tokenizer.json or a tokenizer directory"
        )
    load_examples(options.dataset or DEFAULT_DATASET)


def plan(
    workload: dict, wait: int, warmup: int, active: int | None, reference_steps: int = 0
) -> tuple[WorkloadOptions, int]:
    """Fit the workload's steps and the profiler's window together, and check the options.

    ``--steps`` alone records the steps left after ``wait + warmup`` (and the reference steps);
    ``--active`` alone runs just enough steps to record it; neither gives :data:`DEFAULT_ACTIVE_STEPS`
    recorded steps. ``reference_steps`` unprofiled steps follow the window (without ``--steps``, room is left for as
    many as the recorder may time: it stops the workload once it has enough).

    Returns:
        The checked options and the number of steps to record.
    """
    steps = workload.get("steps")
    Schedule(wait, warmup, 1 if active is None else active).check()
    if steps is not None and steps < wait + warmup + 1 + reference_steps:
        raise UsageError(
            f"--steps {steps}: the profiler skips {wait} + {warmup} steps (--wait, --warmup) before it records and"
            f" {reference_steps} reference steps follow (--reference-steps); use --steps"
            f" {wait + warmup + 1 + reference_steps} or more"
        )
    if active is None:
        active = steps - wait - warmup - reference_steps if steps is not None else DEFAULT_ACTIVE_STEPS
    elif steps is not None and steps < wait + warmup + active + reference_steps:
        raise UsageError(
            f"--steps {steps}: fewer than --wait + --warmup + --active + --reference-steps ="
            f" {wait + warmup + active + reference_steps}; raise --steps or lower --active"
        )
    if steps is None:
        # Enough steps for the whole epochs the recorder times after the window (and the boundary before
        # them): `dlprof record` stops the workload once it has timed the reference steps and those epochs.
        per_epoch = math.ceil(
            len(load_examples(workload.get("dataset") or DEFAULT_DATASET)) / max(1, workload.get("batch_size") or 1)
        )
        steps = (
            wait
            + warmup
            + active
            + MAX_REFERENCE_FACTOR * reference_steps
            + (whole_epochs_to_time(per_epoch) + 1) * per_epoch
            + EPOCH_SETTLE_STEPS
        )
    options = WorkloadOptions(**{**workload, "steps": steps})
    check(options)
    return options, active


def _has_tokenizer(directory: Path) -> bool:
    return any(
        (directory / name).exists()
        for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    )


def load_tokenizer(options: WorkloadOptions):
    """The tokenizer: ``--tokenizer``, else the model directory's own, else the shipped one."""
    from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

    named = options.tokenizer
    if named is None and options.model is not None and _has_tokenizer(Path(options.model)):
        named = options.model
    source = Path(named) if named is not None else DEFAULT_TOKENIZER
    tokenizer: PreTrainedTokenizerBase
    try:
        if source.is_file():
            tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(source))
            vocab = tokenizer.get_vocab()
            for role, token in (("eos_token", "<|im_end|>"), ("pad_token", "<|endoftext|>")):
                if token in vocab:
                    setattr(tokenizer, role, token)
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    except Exception as error:  # transformers raises many types for a bad tokenizer
        raise InputError(
            f"{source}: cannot be loaded as a tokenizer ({type(error).__name__}: {error}); give a tokenizer.json or a"
            " tokenizer directory"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.convert_ids_to_tokens(0)
    return tokenizer


def pick_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: PyTorch sees no CUDA device here; use --device cpu (or auto)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def build_model(options: WorkloadOptions, tokenizer, device: str):
    """The causal LM with LoRA adapters: a local model, or the tiny Qwen2 with random weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    if options.model is not None:
        try:
            model = AutoModelForCausalLM.from_pretrained(options.model, local_files_only=True, dtype=dtype)
        except Exception as error:
            raise InputError(
                f"{options.model}: cannot be loaded as a causal LM ({type(error).__name__}: {error}); give a Hugging"
                " Face causal LM directory"
            ) from None
        # transformers types the input embeddings as any nn.Module; a causal LM's are an nn.Embedding.
        embeddings = cast(torch.nn.Embedding, model.get_input_embeddings())
        if len(tokenizer) > embeddings.num_embeddings:
            raise InputError(
                f"{options.tokenizer or DEFAULT_TOKENIZER}: has {len(tokenizer)} tokens, more than {options.model}"
                " embeds; use the model's own tokenizer"
            )
    else:
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=TINY_HIDDEN_SIZE,
            intermediate_size=TINY_INTERMEDIATE_SIZE,
            num_hidden_layers=TINY_LAYERS,
            num_attention_heads=TINY_HEADS,
            num_key_value_heads=TINY_KV_HEADS,
            max_position_embeddings=max(options.max_length, 2048),
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = Qwen2ForCausalLM(config).to(dtype)  # type: ignore[arg-type]  # transformers' wrapper of to() hides its signature
    lora = LoraConfig(
        r=LORA_RANK,
        lora_alpha=LORA_ALPHA,
        lora_dropout=LORA_DROPOUT,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora).to(device)


class SpeedLog:
    """The workload's own clock: every optimizer step and every epoch (one pass of ``for batch in loader``).

    Measured without any profiler, this is what ``dlprof``'s predictions are checked against
    (scripts/bench_advice.py). The first epoch is warm-up (start-up, first batches, allocator); a step
    is the time from the end of the previous step (or the epoch's start) to the end of its
    ``optimizer.step()``, data wait included (the wait: until the loop body got its batch).
    """

    def __init__(self, steps_per_epoch: int, queue_steps: int = 0, sync=None):
        self.steps_per_epoch = steps_per_epoch
        #: Steps a full prefetch queue lasts (``num_workers × prefetch_factor`` batches; 0 without workers).
        self.queue_steps = queue_steps
        self._sync = sync  # on CUDA, wait for queued work at epoch ends so epochs are timed, not launches
        self.epochs: list[tuple[int, float]] = []  # (steps, seconds) of every epoch, the last may be partial
        self.step_ms: list[tuple[int, float]] = []  # (epoch index, ms)
        self.wait_ms: list[float] = []
        self._epoch_start = self._last = self._ready = 0.0
        self._epoch_steps = 0

    def epoch_begin(self) -> None:
        self._epoch_start = self._last = time.perf_counter()
        self._epoch_steps = 0

    def batch_ready(self) -> None:
        self._ready = time.perf_counter()

    def step_end(self) -> None:
        now = time.perf_counter()
        self.step_ms.append((len(self.epochs), 1000 * (now - self._last)))
        self.wait_ms.append(1000 * max(0.0, self._ready - self._last))
        self._last = now
        self._epoch_steps += 1

    def epoch_end(self) -> None:
        if self._sync is not None:
            self._sync()
        self.epochs.append((self._epoch_steps, time.perf_counter() - self._epoch_start))

    def steady_steps_per_s(self) -> float | None:
        """Steps over time inside the epochs after the first, leaving out each epoch's start-up: its settling steps and
        twice the prefetch queue (a generous bound that needs no model of the refill); None when none is left."""
        skip = EPOCH_SETTLE_STEPS + 2 * self.queue_steps
        by_epoch: dict[int, list[float]] = {}
        for epoch, ms in self.step_ms:
            by_epoch.setdefault(epoch, []).append(ms)
        steady = [ms for epoch, steps in by_epoch.items() if epoch >= 1 for ms in steps[skip:]]
        return 1000 * len(steady) / sum(steady) if steady and sum(steady) > 0 else None

    def summary(self) -> dict:
        """Steps/s over whole epochs after the first, steps/s inside them (:meth:`steady_steps_per_s`), and every
        step's time (None when there are none)."""
        whole = [(steps, seconds) for steps, seconds in self.epochs[1:] if steps == self.steps_per_epoch]
        return {
            "steps_per_s_epochs": sum(s for s, _ in whole) / sum(t for _, t in whole) if whole else None,
            "steps_per_s_steady": self.steady_steps_per_s(),
            "epochs": sum(1 for steps, _ in self.epochs if steps == self.steps_per_epoch),
            "epochs_measured": len(whole),
            "steps_per_epoch": self.steps_per_epoch,
            "epoch_s": [round(seconds, 6) for _, seconds in self.epochs],
            "step_epoch": [epoch for epoch, _ in self.step_ms],
            "step_ms": [round(ms, 4) for _, ms in self.step_ms],
            "wait_ms": [round(ms, 4) for ms in self.wait_ms],
        }


def train(options: WorkloadOptions) -> float:
    """Fine-tune for ``options.steps`` optimizer steps; returns the last loss read back."""
    import click
    import torch
    from torch.utils.data import DataLoader

    from dlprof.workloads.sft import PadCollator, SupervisedDataset

    random.seed(options.seed)
    torch.manual_seed(options.seed)
    device = pick_device(options.device)
    examples = load_examples(options.dataset or DEFAULT_DATASET)
    tokenizer = load_tokenizer(options)
    model = build_model(options, tokenizer, device)
    pin_memory = device == "cuda" if options.pin_memory is None else options.pin_memory
    loader_kwargs: dict[str, Any] = {}
    if options.num_workers > 0:
        loader_kwargs = {"persistent_workers": options.persistent_workers}
        if options.prefetch_factor is not None:
            loader_kwargs["prefetch_factor"] = options.prefetch_factor
    loader = DataLoader(
        SupervisedDataset(examples, tokenizer, options.max_length, options.tokenizer_cost_ms),
        batch_size=options.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(options.seed),
        num_workers=options.num_workers,
        collate_fn=PadCollator(tokenizer.pad_token_id, options.max_length if options.pad_to_max_length else None),
        pin_memory=pin_memory,
        **loader_kwargs,
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    model.train()
    step, last_loss = 0, float("nan")
    queue = options.num_workers * (options.prefetch_factor or 2) if options.num_workers else 0
    speed = SpeedLog(len(loader), queue, sync=torch.cuda.synchronize if device == "cuda" else None)
    with click.progressbar(length=options.steps, label="training", file=sys.stderr, show_pos=True) as bar:
        while step < options.steps:
            speed.epoch_begin()  # before iter(loader): a restart of the workers is this epoch's time
            for batch in loader:
                speed.batch_ready()
                batch = {key: value.to(device, non_blocking=pin_memory) for key, value in batch.items()}
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                speed.step_end()
                bar.update(1)
                if step % LOSS_EVERY_STEPS == 0 or step == options.steps:
                    last_loss = loss.item()
                if step >= options.steps:
                    break
            speed.epoch_end()
    if options.report is not None:
        Path(options.report).write_text(
            json.dumps({**speed.summary(), "num_workers": options.num_workers, "steps": step}, indent=1) + "\n"
        )
    print(
        f"dlprof workload: {options.steps} LoRA steps on {device}, batch {options.batch_size}, loss {last_loss:.3f}",
        file=sys.stderr,
    )
    return last_loss


def main(argv: list[str] | None = None) -> None:
    # peft calls a transformers property that transformers 5 deprecates; nothing the user can act on.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked workers tokenize; no thread pools
    options = parse_args(sys.argv[1:] if argv is None else argv)
    check(options)
    train(options)


if __name__ == "__main__":
    main()
