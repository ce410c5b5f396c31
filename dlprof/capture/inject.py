"""Run a user's script unchanged under dlprof: ``python -m dlprof.capture.inject SCRIPT ARGS``.

``dlprof record -- python train.py ARGS`` starts the user's interpreter on this module (with the
session directory in ``DLPROF_SESSION``); it instruments DataLoaders, starts the profiler, then runs
the script with ``runpy`` exactly as ``python train.py ARGS`` would (``__main__``, ``sys.argv``,
``sys.path[0]``). The script's output and exit code pass through; what the merge needs is written to
the session directory, whatever way the script ends.
"""
from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

from dlprof.errors import DlprofError

#: Environment variable naming the session (scratch) directory of this recording.
SESSION_ENV = "DLPROF_SESSION"
#: File in the session directory holding a DlprofError raised inside the training process.
ERROR_FILE = "error.txt"


def _describe_failure(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            return f"the script exited with code {error.code}"
        return f"the script exited: {error.code}"  # sys.exit("message") prints it and exits 1
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["-m"]:
        # As `python SCRIPT` has it: the script's directory first on sys.path, not the working
        # directory that `python -m` put there (a local inspect.py must not shadow the stdlib's).
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    session_dir = Path(os.environ[SESSION_ENV])
    config = json.loads((session_dir / "config.json").read_text())
    if argv[:1] == ["-m"]:
        module, script_args = argv[1], argv[2:]
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
        sys.argv = [module, *script_args]
    else:
        script, script_args = argv[0], argv[1:]
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
        sys.argv = [script, *script_args]

    from dlprof.capture import loader_probe
    from dlprof.capture.recorder import Recorder
    from dlprof.capture.schedule import Schedule

    loader_probe.install(str(session_dir / "spans"), spans=config.get("loader_spans", True), overrides=config.get("overrides"))
    recorder = Recorder(
        Schedule(**config["schedule"]), session_dir, rank=int(os.environ.get("RANK", "0")),
        reference_steps=config.get("reference_steps", 0), run_to_end=config.get("run_to_end", True),
    )  # fmt: skip
    recorder.start()
    status, error = "complete", None
    try:
        run()
    except DlprofError as failure:
        # dlprof's own one-line errors (the built-in workload's checks): `dlprof record` prints the
        # line, so no traceback here.
        status, error = "partial", str(failure)
        (session_dir / ERROR_FILE).write_text(str(failure))
        raise SystemExit(failure.exit_code) from None
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            status, error = "partial", _describe_failure(exit_)
        raise
    except BaseException as failure:
        status, error = "partial", _describe_failure(failure)
        raise
    finally:
        try:
            recorder.finish(status, error)
        except Exception as finish_error:  # never hide the script's own outcome
            print(f"dlprof: could not finish the recording: {finish_error}", file=sys.stderr)


if __name__ == "__main__":
    main()
