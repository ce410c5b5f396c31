"""TensorBoard scalars of a run's in-process trials (``dlprof record --try-workers``), like ``dlprof sweep``'s.

One point per tried setting at ``global_step = num_workers``, under the sweep's tags (``steps_per_s``,
``predicted_steps_per_s``) and a few more; the settings tried with persistent workers under the same tags prefixed
``persistent_workers/``, so that both lines show at the same counts. The scalars go to ``<run dir>/scalars/``: a
sub-directory, as nothing but traces may sit at the top of a run directory (HTA reads every ``.json``/``.gz`` there).
"""

from __future__ import annotations

from pathlib import Path

from dlprof.results.trials import TrialsResult
from dlprof.workflows.analyze import build_report

#: Sub-directory of the run directory holding the trials' TensorBoard scalars (as a sweep's ``scalars/``).
SCALARS_DIR = "scalars"
#: Tags, per tried setting at global_step = num_workers: the sweep's two, then the trials' own.
TAG_STEPS_PER_S = "steps_per_s"
TAG_PREDICTED_STEPS_PER_S = "predicted_steps_per_s"
TAG_SPREAD_PCT = "spread_pct"
TAG_EPOCH_STEPS_PER_S = "epoch_steps_per_s"
TAG_RESTART_MS = "restart_ms"
TAG_ERROR_PCT = "error_pct"
#: The prediction and its error at the trials' pace (``TrialsPace``), as the report's table shows them.
TAG_PACED_STEPS_PER_S = "paced_steps_per_s"
TAG_PACED_ERROR_PCT = "paced_error_pct"
#: Prefix of the tags of settings tried with persistent workers (``--try-persistent``).
PERSISTENT_PREFIX = "persistent_workers/"


def scalars(trials: TrialsResult) -> list[tuple[str, float, int]]:
    """The scalars to write, as (tag, value, global_step); unknown values are left out."""
    points = []
    for setting in sorted(trials.settings, key=lambda r: (r.persistent_workers, r.num_workers)):
        prefix = PERSISTENT_PREFIX if setting.persistent_workers else ""
        values = {
            TAG_STEPS_PER_S: setting.steps_per_s,
            TAG_PREDICTED_STEPS_PER_S: setting.predicted_steps_per_s,
            TAG_SPREAD_PCT: setting.speed.spread_pct if setting.speed else None,
            TAG_EPOCH_STEPS_PER_S: setting.epoch_steps_per_s,
            TAG_RESTART_MS: setting.restart_ms,
            TAG_ERROR_PCT: setting.error_pct,
            TAG_PACED_STEPS_PER_S: setting.paced_steps_per_s,
            TAG_PACED_ERROR_PCT: setting.paced_error_pct,
        }
        points += [(prefix + tag, value, setting.num_workers) for tag, value in values.items() if value is not None]
    return points


def write_trial_scalars(directory: Path, trials: TrialsResult) -> Path:
    """Write the trials' scalars as TensorBoard event files into ``directory`` (created), and return it.

    ``predicted_steps_per_s`` and ``error_pct`` are on the trials' basis (``trials.basis``); ``paced_steps_per_s`` and
    ``paced_error_pct`` the same at the trials' pace, as the report's table shows them.

    Raises:
        ImportError: the ``tensorboard`` package is not installed (``torch.utils.tensorboard`` needs it).
    """
    from torch.utils.tensorboard import SummaryWriter  # torch's start-up cost only where trials have run

    directory.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(directory))
    try:
        for tag, value, step in scalars(trials):
            writer.add_scalar(tag, value, global_step=step)
    finally:
        writer.close()
    return directory


def write_run_trial_scalars(run_dir: Path) -> Path | None:
    """Analyse the recorded run in ``run_dir`` and write its trials' scalars to ``<run_dir>/scalars/``; None when the
    run has no trials.

    Raises:
        DlprofError: the run cannot be read.
        ImportError: the ``tensorboard`` package is not installed.
    """
    run = build_report(run_dir).runs[0]
    if run.trials is None:
        return None
    return write_trial_scalars(run_dir / SCALARS_DIR, run.trials)
