"""The ``dlprof`` command. Each command parses options, calls one library function, prints the result.

Errors reach the user as one line and exit code 2 (DESIGN.md): Click's usage errors and dlprof's own
(:class:`~dlprof.errors.DlprofError`) alike, never a traceback.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from dlprof import __version__
from dlprof.errors import DlprofError

_WORKLOAD_OPTIONS = (
    "model", "dataset", "tokenizer", "batch_size", "max_length", "steps", "num_workers",
    "pin_memory", "prefetch_factor", "persistent_workers", "device", "seed",
)  # fmt: skip


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


class RecordCommand(click.Command):
    """Remembers whether '--' was given: Click drops a trailing '--', and 'record --' alone must not run the demo."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["dlprof.double_dash"] = "--" in args
        return super().parse_args(ctx, args)


def _default_run_name(command: tuple[str, ...], out_dir: Path) -> str:
    script = None
    for i, word in enumerate(command):  # the first script or module the interpreter runs
        if word == "-m" and i + 1 < len(command):
            script = command[i + 1].rsplit(".", 1)[-1]
            break
        if word.endswith(".py"):
            script = Path(word).stem
            break
    base = f"{script or 'lora'}-{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = base, 1
    while (out_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


@cli.command(cls=RecordCommand)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("traces"), show_default=True, help="Directory that receives the run directory.")
@click.option("--name", help="Run directory name under --out (default: <script>-<date>-<time>).")
@click.option("--wait", type=int, default=2, show_default=True, help="Steps to skip before the profiler warms up.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Steps the profiler runs without keeping them.")
@click.option("--active", type=int, default=None, help="Steps to record [default: 20; with --steps, the steps left after --wait and --warmup].")
@click.option("--loader-spans/--no-loader-spans", default=True, show_default=True, help="Record dataset fetch, tokenizer and collate_fn spans in the loader processes.")
@click.option("--model", type=click.Path(), help="Built-in workload: a local Hugging Face causal LM directory (default: a tiny Qwen2 with random weights).")
@click.option("--dataset", type=click.Path(), help="Built-in workload: a JSON or JSON-lines file of instruction/response records (default: the bundled self-cognition set).")
@click.option("--tokenizer", type=click.Path(), help="Built-in workload: a tokenizer.json or tokenizer directory (default: the model's, else the shipped byte-level BPE).")
@click.option("--batch-size", type=int, default=4, show_default=True, help="Built-in workload: examples per batch.")
@click.option("--max-length", type=int, default=512, show_default=True, help="Built-in workload: tokens per example, longer ones are cut.")
@click.option("--steps", type=int, default=None, help="Built-in workload: optimizer steps to run [default: --wait + --warmup + --active].")
@click.option("--num-workers", type=int, default=2, show_default=True, help="Built-in workload: DataLoader worker processes.")
@click.option("--pin-memory/--no-pin-memory", default=None, help="Built-in workload: DataLoader pin_memory [default: on with CUDA].")
@click.option("--prefetch-factor", type=int, default=None, help="Built-in workload: batches each worker prepares ahead [PyTorch's default: 2].")
@click.option("--persistent-workers", is_flag=True, default=False, help="Built-in workload: keep workers alive between epochs.")
@click.option("--device", default="auto", show_default=True, help="Built-in workload: auto, cpu or cuda.")
@click.option("--seed", type=int, default=0, show_default=True, help="Built-in workload: random seed.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def record(ctx: click.Context, out_dir: Path, name: str | None, wait: int, warmup: int, active: int | None, loader_spans: bool, command: tuple[str, ...], **workload) -> None:
    """Record training steps with torch.profiler, inside DataLoader workers too.

    With no COMMAND, runs the built-in LoRA fine-tune (offline). With '-- python train.py ARGS', runs
    your script unchanged: one profiler step per optimizer step. Writes traces/<run>/*.pt.trace.json.gz
    for TensorBoard (tensorboard --logdir traces) and Perfetto.
    """
    from dlprof.capture.launcher import RecordRequest, record as record_run

    if not command and ctx.meta.get("dlprof.double_dash"):
        raise click.UsageError("no command after '--'; give one, e.g. 'dlprof record -- python train.py', or drop '--' to run the built-in workload")
    if command:
        given = [o for o in _WORKLOAD_OPTIONS if ctx.get_parameter_source(o) != click.core.ParameterSource.DEFAULT]
        if given:
            raise click.UsageError(f"--{given[0].replace('_', '-')} configures the built-in workload; pass your script's own options after '--' instead")
    else:
        from dlprof.workloads.lora import plan

        options, active = plan(workload, wait, warmup, active)
        command = ("python", "-m", "dlprof.workloads.lora", *options.to_argv())
    name = name or _default_run_name(command, out_dir)
    request = RecordRequest(command, out_dir, name, wait, warmup, 20 if active is None else active, tuple(sys.argv), loader_spans=loader_spans)
    result = record_run(request)
    click.echo(f"dlprof: recorded {result.steps_recorded} steps ({result.status}), {result.workers_seen} DataLoader worker(s) seen")
    click.echo(f"  trace: {result.trace_path}")
    click.echo(f"  view:  tensorboard --logdir {out_dir}   or open the file in https://ui.perfetto.dev")
    if result.status != "complete":
        click.echo(f"dlprof: the run ended with an error ({result.error}); the trace is marked partial", err=True)
        ctx.exit(result.exit_code or 2)


@cli.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "html"]), help="Report format [default: from -o's extension, else text].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to this file instead of the terminal.")
def analyze(path: Path, fmt: str | None, output: Path | None) -> None:
    """Where each step's time goes, and the DataLoader settings to use.

    PATH is a run directory (traces/<run>), a trace file (.json or .json.gz), or a directory of
    runs (each analysed, then compared). Works on any PyTorch profiler trace; dlprof's own runs add
    what happens inside the DataLoader workers.
    """
    from dlprof.report import pick_format, renderer, write_report
    from dlprof.report.report import build_report

    fmt = pick_format(fmt, output)
    rendered = renderer(fmt)(build_report(path))
    if output is None:
        click.echo(rendered, nl=False)
    else:
        write_report(output, rendered)
        click.echo(f"dlprof: wrote {output}", err=True)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dlprof")
