"""The in-process trials' part of the manifest (``Manifest.trials``): the settings tried in turn in the running
training, and what the training did after them (manifest v3 on; ``then`` from v7)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TrialSegment:
    """One stretch of training at one DataLoader setting during the in-process trials (``--try-workers``)."""

    num_workers: int
    persistent_workers: bool
    #: The round it belongs to (0, 1, ...): every setting once per round, the order reversed every other round.
    round: int
    #: Its steps in the step clock: ``step_clock[first_step : first_step + steps]``, its refill transient included.
    first_step: int
    steps: int
    #: Switching to it in the main process, ms (None: not measured): waiting for the batches the previous setting
    #: had in flight (they are kept, none is lost), shutting that setting's workers down, creating this setting's
    #: iterator (its workers started), and from that creation to its first batch.
    drain_ms: float | None = None
    shutdown_ms: float | None = None
    start_ms: float | None = None
    first_batch_ms: float | None = None
    #: The switch came where an epoch began (an IterableDataset switches only there), not inside an epoch.
    at_epoch_start: bool = False
    #: The padding segment: the previous segment's setting, its batches trimmed to their longest real sequence in the
    #: main process (no switch of workers); not one of the settings tried.
    trim_padding: bool = False
    #: The process ids of the workers its switch started (``MemorySummary.processes`` has their memory).
    worker_pids: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Then:
    """What the training did after its trials (``--then best`` or ``--then keep``): the setting it went on at, from
    which step."""

    #: ``best`` (the setting the trials' analysis recommends) or ``keep`` (the script's own settings).
    mode: str
    #: The step clock's index of the first step after the trials (the phase ``tuned`` begins there).
    trials_end_step: int
    #: The setting switched to (None: no switch happened; ``error`` says why).
    num_workers: int | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    #: The step clock's index of the first step at that setting (the switch landed in it); the steps from
    #: ``trials_end_step`` to it ran at the last segment's setting while the choice was made.
    first_step: int | None = None
    #: Why the training went on without the switch: the analysis failed, the training ended before the choice.
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Trials:
    """The in-process trials of one run: candidate DataLoader settings trained in turn, in the same process."""

    #: The ``num_workers`` tried, as asked (``--try-workers``).
    counts: tuple[int, ...]
    #: Rounds asked for, and steps timed per segment (after its transient).
    rounds: int
    trial_steps: int
    #: ``persistent_workers=True`` was tried too, at the counts with workers (``--try-persistent``).
    persistent: bool = False
    #: The DataLoader that was switched (``LoaderConfig.id``).
    loader: int | None = None
    segments: tuple[TrialSegment, ...] = ()
    #: Why the trials ended before every planned segment ran (None: they did not).
    incomplete: str | None = None
    #: What else the analysis should know: a rank that followed rank 0's plan late, a switch that waited for an epoch
    #: start.
    notes: tuple[str, ...] = ()
    #: The training loader's first batches checked for padding past their longest real sequence: how many, the share
    #: of their positions trimming would drop (%), and why a batch could not be trimmed without changing the loss.
    trim_checked: int = 0
    trimmable_pct: float | None = None
    trim_refused: str | None = None
    #: ``--max-worker-memory``: no setting whose workers take more memory together (PSS, MiB) is recommended.
    max_worker_memory_mib: float | None = None
    #: What the training did after the trials (None: ``--then stop``, dlprof stopped it).
    then: Then | None = None
