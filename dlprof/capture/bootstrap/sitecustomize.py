"""dlprof's start-up hook: ``dlprof record`` puts this folder first on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up in every process that inherits that path: the command
``dlprof record`` runs and everything it starts (launchers, ranks, helpers). This module

1. runs the user's own ``sitecustomize`` (the next one on ``sys.path``), as it would run without dlprof;
2. arms :mod:`dlprof.capture.session`, which records a process only once it trains.

Outside a recording (no ``DLPROF_SESSION``) it does nothing but step 1.
"""

import os
import sys


def _run_next_sitecustomize() -> None:
    """Import the ``sitecustomize`` that this one shadows, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the user's, or the environment's)
    except ImportError as error:
        if error.name != "sitecustomize":
            _report(error)
    except Exception as error:
        _report(error)
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _report(error: BaseException) -> None:
    """What Python's ``site`` prints when a sitecustomize fails (and start-up goes on)."""
    if sys.flags.verbose:
        sys.excepthook(type(error), error, error.__traceback__)
    else:
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}\n")


def _arm() -> None:
    if not os.environ.get("DLPROF_SESSION"):
        return
    try:
        from dlprof.capture import session

        session.arm()
    except Exception as error:  # dlprof must never stop the user's program
        print(f"dlprof: not recording pid {os.getpid()}: {type(error).__name__}: {error}", file=sys.stderr)


_run_next_sitecustomize()
_arm()
