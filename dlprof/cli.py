"""The ``dlprof`` command. Each command parses options, calls one library function, prints the result.

Errors reach the user as one line and exit code 2 (docs/ARCHITECTURE.md): Click's usage errors and dlprof's own
(:class:`~dlprof.core.errors.DlprofError`) alike, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dlprof import __version__
from dlprof.cli_options import (
    REDACT_HELP,
    WORKLOAD_OPTIONS,
    RecordCommand,
    output_options,
    parse_sweep_counts,
    record_options,
    sweep_trial_length_options,
    trial_lengths_given,
    trial_options,
)
from dlprof.core.errors import DlprofError, error_line


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
            click.echo(error_line(error), err=True)
            code = error.exit_code
        if not standalone_mode:
            return code
        sys.exit(code)


@click.group(cls=DlprofGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlprof")
def cli() -> None:
    """Is my GPU waiting for data? Profile a PyTorch training run, DataLoader workers included."""


def _emit(result, fmt: str, output: Path | None, redactor=None) -> None:
    """Every command's one output step: render, redact (with ``--redact``), then print it or write ``-o``."""
    from dlprof.core.errors import printable
    from dlprof.workflows.output import emit

    text = emit(result, fmt, output, redactor)
    if output is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"dlprof: wrote {printable(str(output))}", err=True)


def _trial_request(options: dict):
    """The TrialRequest of ``record``'s trial options (taken out of ``options``), None without ``--try-workers``."""
    from dlprof.results.record import THEN_STOP
    from dlprof.workflows.record import trial_request

    counts = options.pop("try_workers")
    persistent, steps, rounds = options.pop("try_persistent"), options.pop("trial_steps"), options.pop("trial_rounds")
    memory, then = options.pop("max_worker_memory"), options.pop("then")
    if counts is None:
        given = trial_lengths_given(steps, rounds)
        given += ["--try-persistent"] if persistent else []
        given += ["--max-worker-memory"] if memory is not None else []
        given += [f"--then {then}"] if then is not None else []
        if given:
            raise click.UsageError(f"{given[0]}: only with --try-workers; add --try-workers 0,1,2,4 or drop it")
        return None
    workload_steps = None if options["command"] else options.get("steps")
    return trial_request(
        counts, rounds, persistent, steps, options["run_to_end"], workload_steps, memory, then or THEN_STOP
    )


def _check_command(ctx: click.Context, command: tuple[str, ...]) -> None:
    """The user's command, or the built-in workload's options, never both; and a ``--`` with a command after it."""
    if not command and ctx.meta.get("dlprof.double_dash"):
        raise click.UsageError(
            f"no command after '--'; give one, e.g. '{ctx.command_path} -- python train.py', or drop '--' to run the"
            " built-in workload"
        )
    given = [
        o
        for o in WORKLOAD_OPTIONS
        if command and o in ctx.params and ctx.get_parameter_source(o) != click.core.ParameterSource.DEFAULT
    ]
    if given:
        raise click.UsageError(
            f"--{given[0].replace('_', '-')} configures the built-in workload; pass your script's own options after"
            " '--' instead"
        )


@cli.command(cls=RecordCommand)
@record_options("Run directory name under --out (default: <script>-<date>-<time>).")
@trial_options
@click.option(
    "--plain-launch",
    is_flag=True,
    default=False,
    help=(
        "After the recording, launch the command again without the profiler and time the same steps: the report"
        " then says what recording changed in them, and its predictions are those of the plain launch. One training"
        " process only; the training runs about twice as long."
    ),
)
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
    from dlprof.workflows.record import record_request, recorded_lines, trial_scalars_line, trials_choice

    trials = _trial_request(options)
    _check_command(ctx, options["command"])
    request = record_request(trials=trials, cli_argv=tuple(sys.argv), **options)
    result = record_run(request, choose=trials_choice(trials.then) if trials is not None else None)
    for line, err in recorded_lines(result, request.out_dir, user_command=bool(options["command"])):
        click.echo(line, err=err)
    if result.plain_launch_note is not None:
        click.echo(result.plain_launch_note)
        if result.status == schema.STATUS_COMPLETE and result.exit_code:  # the plain launch was stopped
            ctx.exit(result.exit_code)
    said = trial_scalars_line(result.run_dir) if trials is not None else None
    if said is not None:
        click.echo(said[0], err=said[1])
    if result.status != schema.STATUS_COMPLETE:
        click.echo(f"dlprof: the run ended with an error ({result.error}); the trace is marked partial", err=True)
        ctx.exit(result.exit_code or 2)


def _parse_processes(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--processes N``: a whole number of analysis processes, 1 or more (None: the default, chosen from cores and
    memory)."""
    if value is None:
        return None
    try:
        processes = int(value)
    except ValueError:
        processes = 0
    if processes < 1 or str(processes) != value.strip():
        raise click.BadParameter(
            f"{value!r}: give a whole number of analysis processes, 1 or more (e.g. --processes 4)"
        )
    return processes


@cli.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@output_options("report")
@click.option("--redact", is_flag=True, default=False, help=REDACT_HELP.format(what="report"))
@click.option(
    "-j",
    "--processes",
    callback=_parse_processes,
    metavar="N",
    help="Ranks (trace files) analysed at once, each in a process of its own [default: the usable cores, as many as"
    " fit in the available memory].",
)
# The option's name before --processes, kept working for scripts that use it.
@click.option("--jobs", "old_processes", callback=_parse_processes, metavar="N", hidden=True)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Analyse the ranks on a Ray cluster: 'auto' (the one in RAY_ADDRESS), 'local' (started here, --processes"
    ' CPUs), or its address. Needs the Ray extra: pip install "dlprof[ray]".',
)
def analyze(
    paths: tuple[Path, ...],
    fmt: str | None,
    output: Path | None,
    redact: bool,
    processes: int | None,
    old_processes: int | None,
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

    if processes is not None and old_processes is not None:
        raise click.UsageError("--jobs is the old name of --processes: give one of them")
    if processes is None:
        processes = old_processes
    fmt = pick_format(fmt, output)
    check_output(output, list(paths))
    fixed_mmap_threshold()  # this process reads traces too (--processes 1, one trace): each buffer back to the system
    report = build_report(list(paths), processes=processes, ray=ray_address)
    _emit(report, fmt, output, redactor_for(report, list(paths)) if redact else None)


# --- sweep command (dlprof/workflows/sweep.py) ---


def _sweep_trials(counts: tuple[int, ...], launches: bool, options: dict):
    """The TrialRequest of a sweep measured in process (None with ``--launches``); ``--trial-*`` taken out of
    ``options``."""
    from dlprof.workflows.record import trial_request

    steps, rounds = options.pop("trial_steps"), options.pop("trial_rounds")
    if launches:
        given = trial_lengths_given(steps, rounds)
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
    return trial_request(counts, rounds, False, steps, False)


@cli.command(cls=RecordCommand)
@click.option(
    "--workers",
    "counts",
    required=True,
    callback=parse_sweep_counts,
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
@sweep_trial_length_options
@record_options(
    "Sweep directory name under --out (default: sweep-<script>-<date>-<time>); with --launches, each run goes to"
    " <name>/<num_workers>/.",
    num_workers=False,
)
@output_options("report")
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
    from dlprof.workflows.record import record_request
    from dlprof.workflows.sweep import sweep as run_sweep

    fmt = pick_format(fmt, output, SweepResult)
    check_output(output)  # fail now, not after minutes of recording
    trials = _sweep_trials(counts, launches, options)
    _check_command(ctx, options["command"])
    request = record_request(name_prefix="sweep-", trials=trials, cli_argv=tuple(sys.argv), **options)
    result = run_sweep(counts, request, progress=lambda line: click.echo(line, err=True))
    _emit(result, fmt, output, for_command(request.cli_argv, request.command) if request.redact else None)


# --- diff command (dlprof/workflows/diff.py) ---


@cli.command()
@click.argument("run_a", type=click.Path(exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, path_type=Path))
@output_options("comparison", ("text", "markdown", "json"))
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


# --- open command (dlprof/workflows/open_trace.py) ---


@cli.command("open")
@click.argument("path", metavar="RUN|TRACE", type=click.Path(path_type=Path))
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    help="Of a run of several ranks, this rank's trace [default: the slowest, which dlprof analyze reports].",
)
@click.option("--print-url", is_flag=True, default=False, help="Print the Perfetto UI's address; start no browser.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9001,
    show_default=True,
    help="Port on 127.0.0.1 to serve the trace from (taken: a free one; 0: any free one).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Stop serving when the trace has not been fetched by then.",
)
@click.pass_context
def open_(ctx: click.Context, path: Path, rank: int | None, print_url: bool, port: int, timeout_s: float) -> None:
    """Open a trace in the Perfetto UI (ui.perfetto.dev), as Perfetto's own open_trace_in_ui does.

    Serves the trace once on 127.0.0.1:9001 and opens the browser at the UI, which fetches it; the trace
    never leaves the machine. RUN is a run directory (traces/<run>); of several ranks, the one dlprof
    analyze reports unless --rank says which. TRACE is a trace file.
    """
    from dlprof.workflows.open_trace import INTERRUPTED, TIMED_OUT, open_in_perfetto

    said = lambda line, err: click.echo(line, err=err)
    outcome = open_in_perfetto(path, rank=rank, port=port, timeout_s=timeout_s, print_url=print_url, say=said)
    if outcome == TIMED_OUT:
        click.echo(f"dlprof: nothing fetched the trace in {timeout_s:g} s; stopped serving it", err=True)
        ctx.exit(1)
    if outcome == INTERRUPTED:
        click.echo("dlprof: stopped serving the trace (Ctrl-C)", err=True)
        ctx.exit(130)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dlprof")
