"""The ``dlprof`` command. Each command parses options, calls one library function, prints the result.

Errors reach the user as one line and exit code 2 (docs/ARCHITECTURE.md): Click's usage errors and dlprof's own
(:class:`~dlprof.core.errors.DlprofError`) alike, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dlprof import __version__
from dlprof.core.errors import DlprofError

#: Default schedule: skip start-up (the first steps are slow: allocation, caches, lazy imports), let the
#: profiler warm up, record; then time unprofiled reference steps (the speed predictions are calibrated to).
DEFAULT_WAIT = 5
DEFAULT_ACTIVE = 20
DEFAULT_REFERENCE_STEPS = 40
#: ``--redact``'s help, for the reports of ``analyze``, ``sweep`` and ``diff`` and the traces of ``record``.
REDACT_HELP = (
    "Safe to post: replace host names, the user name and home directory, command-line arguments and dataset/model paths"
    " in the {what} written with stable placeholders ([host-1], [user], ~, [arg-1], [path-1])."
)

_WORKLOAD_OPTIONS = (
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
)


class DlprofGroup(click.Group):
    """A Click group that reports every error as one line with exit code 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            returned = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = returned if isinstance(returned, int) else 0  # ctx.exit(n) comes back as n
        except click.exceptions.Exit as done:
            code = done.exit_code
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx else "dlprof"
            click.echo(f"{where}: error: {error.format_message()} (see '{where} --help')", err=True)
            code = 2
        except click.Abort:
            click.echo("dlprof: aborted", err=True)
            code = 130
        except DlprofError as error:
            click.echo(f"dlprof: error: {error}", err=True)
            code = error.exit_code
        if not standalone_mode:
            return code
        sys.exit(code)


@click.group(cls=DlprofGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlprof")
def cli() -> None:
    """Is my GPU waiting for data? Profile a PyTorch training run, DataLoader workers included."""


def _output_options(what: str, formats: tuple[str, ...] = ("text", "markdown", "json", "html")):
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


def _emit(result, fmt: str, output: Path | None, redactor=None) -> None:
    """Every command's one output step: render, redact (with ``--redact``), then print it or write ``-o``."""
    from dlprof.core.errors import printable
    from dlprof.workflows.output import emit

    text = emit(result, fmt, output, redactor)
    if output is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"dlprof: wrote {printable(str(output))}", err=True)


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
#: The built-in workload's options (:data:`_WORKLOAD_OPTIONS`), in ``--help`` order.
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
)


def _record_options(name_help: str, num_workers: bool = True):
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


def _trial_length_options(condition: str) -> tuple:
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


def _trial_lengths_given(steps: int | None, rounds: int | None) -> list[str]:
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
    *_trial_length_options("With --try-workers: "),
)


def _trial_request(options: dict):
    """The TrialRequest of ``record``'s trial options (taken out of ``options``), None without ``--try-workers``."""
    from dlprof.capture.trial_plan import check_request
    from dlprof.results.record import DEFAULT_TRIAL_ROUNDS, TrialRequest

    counts = options.pop("try_workers")
    persistent, steps, rounds = options.pop("try_persistent"), options.pop("trial_steps"), options.pop("trial_rounds")
    if counts is None:
        given = _trial_lengths_given(steps, rounds)
        if persistent or given:
            given = given or ["--try-persistent"]
            raise click.UsageError(f"{given[0]}: only with --try-workers; add --try-workers 0,1,2,4 or drop it")
        return None
    request = TrialRequest(counts, rounds or DEFAULT_TRIAL_ROUNDS, persistent, steps)
    workload_steps = None if options["command"] else options.get("steps")
    check_request(request, options["run_to_end"], workload_steps)
    return request


def _record_request(
    ctx: click.Context,
    *,
    out_dir: Path,
    name: str | None,
    wait: int,
    warmup: int,
    active: int | None,
    reference_steps: int,
    run_to_end: bool,
    loader_spans: bool,
    command: tuple[str, ...],
    name_prefix: str = "",
    redact: bool = False,
    trials=None,
    **workload,
):
    """The RecordRequest for ``record``'s and ``sweep``'s options: the user's command, else the built-in workload's."""
    from dlprof.capture.run_dir import default_run_name
    from dlprof.results.record import RecordRequest

    if not command and ctx.meta.get("dlprof.double_dash"):
        raise click.UsageError(
            f"no command after '--'; give one, e.g. '{ctx.command_path} -- python train.py', or drop '--' to run the"
            " built-in workload"
        )
    if command:
        given = [
            o
            for o in _WORKLOAD_OPTIONS
            if o in ctx.params and ctx.get_parameter_source(o) != click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise click.UsageError(
                f"--{given[0].replace('_', '-')} configures the built-in workload; pass your script's own options after"
                " '--' instead"
            )
    else:
        from dlprof.workloads.lora import plan

        options, active = plan(workload, wait, warmup, active, reference_steps)
        if trials is not None:  # room for the trials too: dlprof stops the workload once they are done
            from dataclasses import replace

            from dlprof.capture.trial_plan import steps_bound

            options = replace(options, steps=options.steps + steps_bound(trials, options.prefetch_factor))
        command = ("python", "-m", "dlprof.workloads.lora", *options.to_argv())
        # Without --steps the built-in workload trains until dlprof has what it needs.
        run_to_end = workload.get("steps") is not None
    made_up = name is None
    name = name or default_run_name(command, out_dir, name_prefix)
    return RecordRequest(
        command,
        out_dir,
        name,
        wait,
        warmup,
        DEFAULT_ACTIVE if active is None else active,
        tuple(sys.argv),
        loader_spans=loader_spans,
        reference_steps=reference_steps,
        run_to_end=run_to_end,
        fresh_name_if_taken=made_up,
        redact=redact,
        trials=trials,
    )


def _timed_reference_steps(result) -> str:
    """The unprofiled reference steps timed, as ``dlprof analyze`` counts them: ``"7"``, or ``"7-9"`` when ranks
    differ."""
    from dlprof.analysis.unprofiled import reference_step_indices

    counts = sorted({len(reference_step_indices(m)) for m in result.manifests}) or [0]
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _echo_recorded(result, out_dir: Path, user_command: bool) -> None:
    """What ``record`` recorded, where the traces are, and how to view them."""
    ranks = len(result.trace_paths)
    per_rank = " per rank" if ranks > 1 else ""
    click.echo(
        f"dlprof: recorded {result.steps_recorded} steps{per_rank} ({result.status}), {result.workers_seen} DataLoader"
        " worker(s) seen" + (f", {ranks} ranks" if ranks > 1 else "")
    )
    for trace_path in result.trace_paths:
        click.echo(f"  trace: {trace_path}")
    click.echo(f"  view:  tensorboard --logdir {out_dir}   or open the file in https://ui.perfetto.dev")
    trials = _trials_ran(result)
    if result.stopped_early and user_command:
        click.echo(
            f"dlprof: stopped training after the window and {_timed_reference_steps(result)} unprofiled reference"
            f" steps{trials}; add --run-to-end{' (without --try-workers)' if trials else ''} to let it train to its end"
        )
    elif trials:
        click.echo(f"dlprof: timed {_timed_reference_steps(result)} unprofiled reference steps{trials}")
    incomplete = next((m.trials.incomplete for m in result.manifests if m.trials and m.trials.incomplete), None)
    if incomplete:
        click.echo(f"dlprof: the trials are incomplete: {incomplete}", err=True)


def _write_trial_scalars(run_dir: Path) -> None:
    """The trials' TensorBoard scalars into ``<run>/scalars/`` (as ``dlprof sweep`` writes its own)."""
    from dlprof.workflows.trials import write_run_trial_scalars

    try:
        written = write_run_trial_scalars(run_dir)
    except ImportError:  # torch.utils.tensorboard needs the tensorboard package; the trials themselves do not
        click.echo("dlprof: the trials' TensorBoard scalars were not written (pip install tensorboard)", err=True)
        return
    except DlprofError as error:  # the recording is kept; analysing it is the user's next step anyway
        click.echo(f"dlprof: the trials' TensorBoard scalars were not written ({error})", err=True)
        return
    if written is not None:
        click.echo(f"  trials: TensorBoard scalars in {written}; the report: dlprof analyze {run_dir}")


def _trials_ran(result) -> str:
    """``", then tried num_workers 0,2 in the training (4 segments in 2 rounds)"``, or "" without trials."""
    trials = next((m.trials for m in result.manifests if m.trials is not None), None)
    if trials is None:
        return ""
    rounds = len({segment.round for segment in trials.segments})
    persistent = " (and persistent workers)" if trials.persistent else ""
    return (
        f", then tried num_workers {','.join(map(str, trials.counts))}{persistent} in the training"
        f" ({len(trials.segments)} segment{'s' if len(trials.segments) != 1 else ''} in {rounds}"
        f" round{'s' if rounds != 1 else ''})"
    )


def _trial_options(command):
    for option in reversed(_TRIAL_OPTIONS):
        command = option(command)
    return command


@cli.command(cls=RecordCommand)
@_record_options("Run directory name under --out (default: <script>-<date>-<time>).")
@_trial_options
@click.pass_context
def record(ctx: click.Context, **options) -> None:
    """Record training steps with torch.profiler, inside DataLoader workers too.

    With no COMMAND, runs the built-in LoRA fine-tune (offline). With '-- python train.py ARGS', runs
    your script unchanged: one profiler step per optimizer step. Any launcher works too ('-- torchrun
    --nproc-per-node 2 train.py', '-- accelerate launch train.py', '-- swift sft ...'): every process
    that trains is recorded, one trace per rank. Writes traces/<run>/*.pt.trace.json.gz for TensorBoard
    (tensorboard --logdir traces) and Perfetto.
    """
    from dlprof.capture.record import record as record_run
    from dlprof.core import schema

    trials = _trial_request(options)
    request = _record_request(ctx, trials=trials, **options)
    result = record_run(request)
    _echo_recorded(result, request.out_dir, user_command=bool(options["command"]))
    if trials is not None:
        _write_trial_scalars(result.run_dir)
    if result.status != schema.STATUS_COMPLETE:
        click.echo(f"dlprof: the run ended with an error ({result.error}); the trace is marked partial", err=True)
        ctx.exit(result.exit_code or 2)


def _parse_jobs(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--jobs N``: a whole number of worker processes, 1 or more (None: the default, chosen from cores and memory)."""
    if value is None:
        return None
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1 or str(jobs) != value.strip():
        raise click.BadParameter(f"{value!r}: give a whole number of worker processes, 1 or more (e.g. --jobs 4)")
    return jobs


@cli.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@_output_options("report")
@click.option("--redact", is_flag=True, default=False, help=REDACT_HELP.format(what="report"))
@click.option(
    "--jobs",
    callback=_parse_jobs,
    metavar="N",
    help="Ranks (trace files) analysed at once, each in a worker process [default: the usable cores, as many as"
    " fit in the available memory].",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Analyse the ranks on a Ray cluster: 'auto' (the one in RAY_ADDRESS), 'local' (started here, --jobs"
    ' CPUs), or its address. Needs the Ray extra: pip install "dlprof[ray]".',
)
def analyze(
    paths: tuple[Path, ...],
    fmt: str | None,
    output: Path | None,
    redact: bool,
    jobs: int | None,
    ray_address: str | None,
) -> None:
    """Where each step's time goes, and the DataLoader settings to use.

    PATH is a run directory (traces/<run>; with several ranks, every rank side by side), a trace
    file (.json or .json.gz), or a directory of runs (each analysed, then compared). Several PATHs are
    the run directories that the nodes of one job wrote each on their own disk (node0/job node1/job),
    analysed as one run. Works on any PyTorch profiler trace; dlprof's own runs add what happens inside
    the DataLoader workers.
    """
    from dlprof.report import pick_format
    from dlprof.workflows.analyze import build_report
    from dlprof.workflows.output import check_output, redactor_for
    from dlprof.workflows.parallel import fixed_mmap_threshold

    fmt = pick_format(fmt, output)
    check_output(output, list(paths))
    fixed_mmap_threshold()  # this process reads traces too (--jobs 1, one trace): each buffer back to the system
    report = build_report(list(paths), jobs=jobs, ray=ray_address)
    _emit(report, fmt, output, redactor_for(report, list(paths)) if redact else None)


# --- sweep command (dlprof/workflows/sweep.py) ---


def _parse_counts(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
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


def _trials_length_options(command):
    """``sweep``'s ``--trial-steps`` and ``--trial-rounds``."""
    for option in reversed(_trial_length_options("")):
        command = option(command)
    return command


def _sweep_trials(counts: tuple[int, ...], launches: bool, options: dict):
    """The TrialRequest of a sweep measured in process (None with ``--launches``); ``--trial-*`` taken out of
    ``options``."""
    from dlprof.capture.trial_plan import check_request
    from dlprof.results.record import DEFAULT_TRIAL_ROUNDS, TrialRequest

    steps, rounds = options.pop("trial_steps"), options.pop("trial_rounds")
    if launches:
        given = _trial_lengths_given(steps, rounds)
        if given:
            raise click.UsageError(f"{given[0]}: the trials' option, not --launches'; drop one of them")
        return None
    if options["run_to_end"]:
        raise click.UsageError(
            "--run-to-end: the in-process trials run in the steps dlprof would stop; add --launches to measure one"
            " launch per count, each trained to its end"
        )
    if not options["command"] and options.get("steps") is not None:
        raise click.UsageError(
            f"--steps {options['steps']}: the built-in workload then trains to its end, leaving no steps for the"
            " in-process trials; drop --steps, or add --launches"
        )
    request = TrialRequest(counts, rounds or DEFAULT_TRIAL_ROUNDS, False, steps)
    check_request(request, False)
    return request


@cli.command(cls=RecordCommand)
@click.option(
    "--workers",
    "counts",
    required=True,
    callback=_parse_counts,
    help=(
        "num_workers to measure, comma-separated (e.g. 0,1,2,4); the first count's profiled window makes the advice"
        " the others check."
    ),
)
@click.option(
    "--launches",
    is_flag=True,
    default=False,
    help=(
        "Launch the training once per count (each recorded into <name>/<num_workers>/) instead of trying every count"
        " inside one launch: how the model is checked across processes."
    ),
)
@_trials_length_options
@_record_options(
    "Sweep directory name under --out (default: sweep-<script>-<date>-<time>); with --launches, each run goes to"
    " <name>/<num_workers>/.",
    num_workers=False,
)
@_output_options("report")
@click.pass_context
def sweep(
    ctx: click.Context, counts: tuple[int, ...], launches: bool, fmt: str | None, output: Path | None, **options
) -> None:
    """Measure num_workers candidates for real, and check dlprof's advice against them.

    Records COMMAND (default: the built-in workload) once at the first --workers count, into <out>/<name>/;
    after its profiled window and reference steps, the same training trains on at every count in turn, inside
    the one process, in rounds (one model load, no launch-to-launch noise). With --launches, records COMMAND once
    per count instead, with that num_workers imposed on every DataLoader, into <out>/<name>/<count>/. The first
    count's window makes the advice and the predictions the others check. TensorBoard scalars go to
    <out>/<name>/scalars/.
    """
    from dlprof.core.redact import for_command
    from dlprof.report import pick_format
    from dlprof.results.sweep import SweepResult
    from dlprof.workflows.output import check_output
    from dlprof.workflows.sweep import sweep as run_sweep

    fmt = pick_format(fmt, output, SweepResult)
    check_output(output)  # fail now, not after minutes of recording
    trials = _sweep_trials(counts, launches, options)
    request = _record_request(ctx, name_prefix="sweep-", trials=trials, **options)
    result = run_sweep(counts, request, progress=lambda line: click.echo(line, err=True))
    _emit(result, fmt, output, for_command(request.cli_argv, request.command) if request.redact else None)


# --- diff command (dlprof/workflows/diff.py) ---


@cli.command()
@click.argument("run_a", type=click.Path(exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, path_type=Path))
@_output_options("comparison", ("text", "markdown", "json"))
@click.option("--redact", is_flag=True, default=False, help=REDACT_HELP.format(what="comparison"))
def diff(run_a: Path, run_b: Path, fmt: str | None, output: Path | None, redact: bool) -> None:
    """Before and after: what changed between two runs, and what it did.

    RUN_A (before) and RUN_B (after) are each one run directory (traces/<run>) or one trace file; of a
    run of several ranks, the slowest rank is compared (the one dlprof analyze reports).
    """
    from dlprof.report import pick_format
    from dlprof.results.diff import DiffResult
    from dlprof.workflows.diff import diff as diff_runs
    from dlprof.workflows.output import check_output, redactor_for

    check_output(output, [run_a, run_b], what="diff", keep_run_dirs_clean=True)
    fmt = pick_format(fmt, output, DiffResult)
    result = diff_runs(run_a, run_b)
    _emit(result, fmt, output, redactor_for(result, [run_a, run_b]) if redact else None)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dlprof")
