"""Run a user's script unchanged under dlprof: ``python -m dlprof.capture.inject SCRIPT ARGS``.

``dlprof record -- python train.py ARGS`` starts the user's interpreter on this module (with the
session directory in ``DLPROF_SESSION``); it instruments DataLoaders, then runs the script with
``runpy`` exactly as ``python train.py ARGS`` would (``__main__``, ``sys.argv``, ``sys.path[0]``).
Recording starts at the script's first training step (:mod:`dlprof.capture.session`), so a script
that only launches others (``python -m torch.distributed.run``) records nothing itself. The script's
output and exit code pass through; what the merge needs is written to the session directory,
whatever way the script ends.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from dlprof.capture.session import ERROR_FILE, SESSION_ENV, arm, describe_failure
from dlprof.core.errors import DlprofError

__all__ = ["ERROR_FILE", "SESSION_ENV", "main"]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["-m"]:
        # As `python SCRIPT` has it: the script's directory first on sys.path, not the working
        # directory that `python -m` put there (a local inspect.py must not shadow the stdlib's).
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    session_dir = Path(os.environ[SESSION_ENV])
    if argv[:1] == ["-m"]:
        module, script_args = argv[1], argv[2:]
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
        sys.argv = [module, *script_args]
    else:
        script, script_args = argv[0], argv[1:]
        run = lambda: runpy.run_path(script, run_name="__main__")
        sys.argv = [script, *script_args]

    # Armed already when the bootstrap sitecustomize ran at start-up; this process finishes explicitly,
    # knowing how the script ended (an exit code included, which no exit hook can see).
    session = arm(exit_hooks=False)
    if session is None:
        raise SystemExit(
            f"dlprof: {SESSION_ENV} names no recording session ({session_dir}); run this through 'dlprof record'"
        )
    session.exit_hooks = False
    import torch  # noqa: F401  (instruments DataLoaders before the script creates any)

    session.on_torch_imported()
    try:
        run()
    except DlprofError as failure:
        # dlprof's own one-line errors (the built-in workload's checks): `dlprof record` prints the
        # line, so no traceback here.
        session.fail(str(failure))
        (session_dir / ERROR_FILE).write_text(str(failure))
        raise SystemExit(failure.exit_code) from None
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            session.fail(describe_failure(exit_))
        raise
    except BaseException as failure:
        session.fail(describe_failure(failure))
        raise
    finally:
        session.finish(top_level=True)


if __name__ == "__main__":
    main()
