"""The command line's options that ``record`` and ``sweep`` share (the run directory, the profiler's schedule, the
built-in workload, the in-process trials) and the output options of every report, with the callbacks that read them.

``cli.py`` holds the commands; this module only declares how their options are spelled, defaulted and parsed.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from dlprof.core.errors import DlprofError
from dlprof.results.record import THEN_MODES

#: Default schedule: skip start-up (the first steps are slow: allocation, caches, lazy imports), let the
#: profiler warm up, record; then time unprofiled reference steps (the speed predictions are calibrated to).
DEFAULT_WAIT = 5
DEFAULT_REFERENCE_STEPS = 40
#: ``--redact``'s help, for the reports of ``analyze``, ``sweep`` and ``diff`` and the traces of ``record``.
REDACT_HELP = (
    "Safe to post: replace host names, the user name and home directory, command-line arguments and dataset/model paths"
    " in the {what} written with stable placeholders ([host-1], [user], ~, [arg-1], [path-1])."
)


WORKLOAD_OPTIONS = (
    "model",
    "dataset",
    "tokenizer",
    "batch_size",
    "max_length",
    "steps",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "device",
    "seed",
    "tokenizer_cost_ms",
    "pad_to_max_length",
)


def output_options(what: str, formats: tuple[str, ...] = ("text", "markdown", "json", "html")):
    """``--format`` and ``-o``, which ``analyze``, ``sweep`` and ``diff`` share."""

    def apply(command):
        command = click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False, path_type=Path),
            help=f"Write the {what} to this file instead of the terminal.",
        )(command)
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(list(formats)),
            help="Report format [default: from -o's extension, else text].",
        )(command)

    return apply


class RecordCommand(click.Command):
    """Remembers whether '--' was given: Click drops a trailing '--', and 'record --' alone must not run the demo."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["dlprof.double_dash"] = "--" in args
        return super().parse_args(ctx, args)


#: ``record``'s and ``sweep``'s options before ``--name``.
_OUT_OPTION = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("traces"),
    show_default=True,
    help="Directory that receives the run directory.",
)
#: ``record``'s and ``sweep``'s options after ``--name``: the profiler's schedule and what is recorded.
_SCHEDULE_OPTIONS = (
    click.option(
        "--wait",
        type=int,
        default=DEFAULT_WAIT,
        show_default=True,
        help="Steps to skip before the profiler warms up (start-up is not steady state).",
    ),
    click.option(
        "--warmup", type=int, default=3, show_default=True, help="Steps the profiler runs without keeping them."
    ),
    click.option(
        "--active",
        type=int,
        default=None,
        help="Steps to record [default: 20; with --steps, the steps left after --wait and --warmup].",
    ),
    click.option(
        "--reference-steps",
        type=click.IntRange(min=0),
        default=DEFAULT_REFERENCE_STEPS,
        show_default=True,
        help=(
            "Unprofiled steps timed after the window: your training's real speed, which predictions are calibrated to."
        ),
    ),
    click.option(
        "--run-to-end",
        is_flag=True,
        default=False,
        help=(
            "Let your script train to its end [default: stop it cleanly once the window and the reference steps are"
            " done]."
        ),
    ),
    click.option(
        "--loader-spans/--no-loader-spans",
        default=True,
        show_default=True,
        help="Record dataset fetch, tokenizer and collate_fn spans in the loader processes.",
    ),
    click.option("--redact", is_flag=True, default=False, help=REDACT_HELP.format(what="traces and reports")),
)
#: ``--num-workers``: ``sweep`` sets num_workers itself, from ``--workers``.
_NUM_WORKERS_OPTION = click.option(
    "--num-workers", type=int, default=2, show_default=True, help="Built-in workload: DataLoader worker processes."
)
#: The built-in workload's options (:data:`WORKLOAD_OPTIONS`), in ``--help`` order.
_WORKLOAD = (
    click.option(
        "--model",
        type=click.Path(),
        help="Built-in workload: a local Hugging Face causal LM directory (default: a tiny Qwen2 with random weights).",
    ),
    click.option(
        "--dataset",
        type=click.Path(),
        help=(
            "Built-in workload: a JSON or JSON-lines file of instruction/response records (default: the bundled"
            " self-cognition set)."
        ),
    ),
    click.option(
        "--tokenizer",
        type=click.Path(),
        help=(
            "Built-in workload: a tokenizer.json or tokenizer directory (default: the model's, else the shipped"
            " byte-level BPE)."
        ),
    ),
    click.option("--batch-size", type=int, default=4, show_default=True, help="Built-in workload: examples per batch."),
    click.option(
        "--max-length",
        type=int,
        default=512,
        show_default=True,
        help="Built-in workload: tokens per example, longer ones are cut.",
    ),
    click.option(
        "--steps",
        type=int,
        default=None,
        help="Built-in workload: optimizer steps to run [default: until the window and the reference steps are done].",
    ),
    _NUM_WORKERS_OPTION,
    click.option(
        "--pin-memory/--no-pin-memory",
        default=None,
        help="Built-in workload: DataLoader pin_memory [default: on with CUDA].",
    ),
    click.option(
        "--prefetch-factor",
        type=int,
        default=None,
        help="Built-in workload: batches each worker prepares ahead [PyTorch's default: 2].",
    ),
    click.option(
        "--persistent-workers",
        is_flag=True,
        default=False,
        help="Built-in workload: keep workers alive between epochs.",
    ),
    click.option("--device", default="auto", show_default=True, help="Built-in workload: auto, cpu or cuda."),
    click.option("--seed", type=int, default=0, show_default=True, help="Built-in workload: random seed."),
    click.option(
        "--tokenizer-cost-ms",
        type=float,
        default=0.0,
        show_default=True,
        help="Built-in workload: CPU ms added to tokenizing each sample (a slow tokenizer).",
    ),
    click.option(
        "--pad-to-max-length",
        is_flag=True,
        default=False,
        help="Built-in workload: pad every batch to --max-length (padding='max_length'), not to its longest example.",
    ),
)


def record_options(name_help: str, num_workers: bool = True):
    """The options ``record`` and ``sweep`` share (output, schedule, the built-in workload) and the COMMAND argument.

    Args:
        name_help: help of ``--name`` (a run directory for ``record``, a sweep directory for ``sweep``).
        num_workers: offer ``--num-workers`` (``sweep`` sets num_workers itself, from ``--workers``).
    """
    workload = [o for o in _WORKLOAD if num_workers or o is not _NUM_WORKERS_OPTION]
    options = [_OUT_OPTION, click.option("--name", help=name_help), *_SCHEDULE_OPTIONS, *workload]
    options.append(click.argument("command", nargs=-1, type=click.UNPROCESSED))

    def apply(command):
        for option in reversed(options):  # listed in --help order; decorators apply bottom-up
            command = option(command)
        return command

    return apply


def _parse_try_workers(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """``--try-workers 0,1,2,4``: comma-separated, >= 0, distinct, at least one."""
    from dlprof.capture.trial_plan import parse_counts

    if value is None:
        return None
    try:
        return parse_counts(value)
    except DlprofError as error:
        raise click.BadParameter(str(error).removeprefix("--try-workers ")) from None


def _parse_mib(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A memory size in MiB: a number > 0 (not NaN)."""
    if value is not None and not (0 < value < math.inf):
        raise click.BadParameter(f"{value}: give the MiB as a number > 0, e.g. 4096")
    return value


def trial_length_options(condition: str) -> tuple:
    """``--trial-steps`` and ``--trial-rounds`` (``record``'s and ``sweep``'s), their help starting with
    ``condition`` (e.g. ``"With --try-workers: "``)."""
    steps = (
        "steps timed per trial segment, after its refill [default: 40, at least 2 s at the measured step time, and 2 s"
        " over the rounds at that step without its data wait]."
    )
    rounds = "rounds, each trying every setting, every other one in reverse order [default: 2]."
    say = lambda text: f"{condition}{text}" if condition else text[0].upper() + text[1:]
    return (
        click.option("--trial-steps", type=click.IntRange(min=1), default=None, help=say(steps)),
        click.option("--trial-rounds", type=click.IntRange(min=1), default=None, help=say(rounds)),
    )


def trial_lengths_given(steps: int | None, rounds: int | None) -> list[str]:
    """Which of ``--trial-steps`` and ``--trial-rounds`` were given."""
    return [name for name, value in (("--trial-steps", steps), ("--trial-rounds", rounds)) if value is not None]


#: ``record``'s options for the in-process trials.
_TRIAL_OPTIONS = (
    click.option(
        "--try-workers",
        "try_workers",
        callback=_parse_try_workers,
        help=(
            "After the reference steps, train on at each of these num_workers in turn (comma-separated, e.g. 0,1,2,4),"
            " inside the same process, in rounds; dlprof analyze then shows each count's measured speed."
        ),
    ),
    click.option(
        "--try-persistent",
        is_flag=True,
        default=False,
        help="With --try-workers: also try persistent_workers=True at the counts with workers.",
    ),
    click.option(
        "--max-worker-memory",
        type=float,
        callback=_parse_mib,
        default=None,
        metavar="MIB",
        help=(
            "With --try-workers: recommend no setting whose workers take more memory than this together (PSS, MiB,"
            " measured in its trial; predicted for counts not tried); the report says which were ruled out."
        ),
    ),
    click.option(
        "--then",
        "then",
        type=click.Choice(THEN_MODES),
        default=None,
        help=(
            "With --try-workers, after the trials: stop the training (the default), or train on to its own end at the"
            " setting they recommend (best) or at the script's own (keep); the trials' report comes while it trains,"
            " and at its end whether the chosen setting's speed held."
        ),
    ),
    *trial_length_options("With --try-workers: "),
)


def trial_options(command):
    """``record``'s options for the in-process trials (``--try-workers`` and what goes with it)."""
    for option in reversed(_TRIAL_OPTIONS):
        command = option(command)
    return command


def parse_sweep_counts(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """``--workers 0,1,2,4``: comma-separated, non-negative, distinct, at least two."""
    from dlprof.workflows.sweep import check_counts

    try:
        counts = [int(word) for word in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give comma-separated whole numbers, e.g. --workers 0,1,2,4") from None
    try:
        return check_counts(counts)
    except DlprofError as error:
        raise click.BadParameter(str(error).removeprefix("--workers: ")) from None


def sweep_trial_length_options(command):
    """``sweep``'s ``--trial-steps`` and ``--trial-rounds``."""
    for option in reversed(trial_length_options("")):
        command = option(command)
    return command
