"""What ``dlprof record`` is asked, what each recorded process hands over, and what the record produced.

:class:`RecordRequest` goes in (the CLI, ``dlprof sweep`` and ``DlprofCallback`` build it);
:class:`RankResult` is one training process's recording, written by the recorder into the session
directory and read back by ``dlprof record``'s own process through one parser
(:func:`dlprof.capture.finalize.read_rank_result`); the merge turns it and the rank's trace into the
trace's :class:`~dlprof.core.manifest.Manifest`; :class:`RecordResult` comes out. Standard library and
:mod:`dlprof.core.manifest` only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlprof.core.manifest import Host, LoaderConfig, Manifest, Schedule, StepClock, Trials

#: Shortest period of the memory sampler (:mod:`dlprof.capture.memory`), ms: resolves a worker's start-up and
#: growth over a run of seconds.
DEFAULT_MEMORY_INTERVAL_MS = 100
#: Rounds of in-process trials: every setting once per round, the order reversed every other round (drift cancels).
DEFAULT_TRIAL_ROUNDS = 2


#: ``--then``'s choices.
THEN_STOP, THEN_BEST, THEN_KEEP = "stop", "best", "keep"
THEN_MODES = (THEN_STOP, THEN_BEST, THEN_KEEP)


@dataclass(frozen=True, kw_only=True)
class TrialRequest:
    """The in-process trials asked for (``--try-workers``, ``--try-persistent``, ``--trial-steps``,
    ``--trial-rounds``): after the reference steps, the training DataLoader trains at each setting in turn."""

    #: The num_workers to try, in the order asked.
    counts: tuple[int, ...]
    rounds: int = DEFAULT_TRIAL_ROUNDS
    #: Also try persistent_workers=True at the counts with workers.
    persistent: bool = False
    #: Steps timed per segment, after its refill transient (None: from the measured step time).
    trial_steps: int | None = None
    #: ``--max-worker-memory``: settings whose workers take more memory together (PSS, MiB) are not recommended.
    max_worker_memory_mib: float | None = None
    #: ``--then``: after the trials, stop the training (:data:`THEN_STOP`), or train on at the recommended setting
    #: (:data:`THEN_BEST`) or at the script's own (:data:`THEN_KEEP`).
    then: str = THEN_STOP


@dataclass(frozen=True, kw_only=True)
class RecordRequest:
    """Everything ``dlprof record`` was asked to do."""

    command: tuple[str, ...]
    out_dir: Path
    name: str
    wait: int
    warmup: int
    active: int
    cli_argv: tuple[str, ...] = ()
    memory_interval_ms: int = DEFAULT_MEMORY_INTERVAL_MS
    loader_spans: bool = True
    #: Unprofiled steps timed after the window (the training's real speed, without the profiler).
    reference_steps: int = 0
    #: Let the training run to its own end; else it is stopped once the reference steps are timed.
    run_to_end: bool = True
    #: DataLoader settings imposed on the script (dlprof sweep): {"num_workers": n}.
    overrides: dict | None = None
    #: The name was made up by dlprof: if it is taken, take the next free one instead of failing.
    fresh_name_if_taken: bool = False
    #: ``--redact``: traces with placeholders for host names, the user, arguments and paths (dlprof.core.redact).
    redact: bool = False
    #: ``--try-workers``: candidate DataLoader settings tried in the training process after the reference steps.
    trials: TrialRequest | None = None
    #: Where training would be stopped, the caller stops it (the Trainer callback): no SystemExit is raised.
    caller_stops: bool = False
    #: ``--plain-launch``: after the recording, launch the command again without the profiler and time the same steps.
    plain_launch: bool = False

    @property
    def schedule(self) -> Schedule:
        """The profiler's schedule (:meth:`~dlprof.core.manifest.Schedule.check` it before anything starts)."""
        return Schedule(self.wait, self.warmup, self.active)


@dataclass(frozen=True, kw_only=True)
class PlainLaunch:
    """The recorded command launched again without the profiler or dlprof's spans (``dlprof record --plain-launch``):
    what its steps took, numbered as the recording's step clock numbers them, to measure what recording changed in
    the steps after the window."""

    #: The trace (its file name) whose steps this launch timed again.
    trace: str
    #: Each step's wall time, ms: the time from one step of the training's first optimizer to the next, as the step
    #: clock times it (its first entry is the step clock's first step).
    step_ms: tuple[float, ...]
    #: The steps it was to time: the recording's last reference step. Fewer in ``step_ms`` where the training ended
    #: first.
    stop_step: int
    #: How the launch ended (as a shell reports it; 0 when dlprof stopped it at ``stop_step``).
    exit_code: int


@dataclass(frozen=True)
class ClockReading:
    """The training process's clocks at a step boundary, ns: wall (``time.time_ns``), its CPU time (all threads)
    and its training thread's run-queue wait."""

    wall_ns: int
    cpu_ns: int
    runq_ns: int


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """One training process's recording, as its recorder hands it to the merge (``result-rank<R>-<pid>.json``)."""

    status: str  # schema.STATUS_COMPLETE | schema.STATUS_PARTIAL
    error: str | None
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    #: This process's own command line (a launcher's worker: ``python -u train.py ...``).
    process_argv: tuple[str, ...]
    pid: int
    #: The exported window, a file in the session directory; None when nothing was exported.
    trace_file: str | None
    #: Why the window could not be exported (a full disk), if it could not.
    export_error: str | None
    steps_run: int
    #: The schedule, with ``step_mode`` set once a step was taken.
    schedule: Schedule
    #: When the profiler window opened (its first recorded step's batches are produced from then on).
    window_start_ns: int | None
    #: The clocks at each step boundary while the window was open: the main process's CPU per recorded step.
    window_clock: tuple[ClockReading, ...]
    #: Every step, profiled or not.
    step_clock: StepClock
    stopped_early: bool
    finished_ns: int
    loaders: tuple[LoaderConfig, ...]
    host: Host
    versions: dict[str, str] = field(default_factory=dict)
    #: Written when the window was exported, before the process finished: stands in for a process that
    #: never finished its recording (killed), and is replaced by the final one.
    provisional: bool = False
    #: The in-process trials, when they were asked for (what ran, or why none did).
    trials: Trials | None = None


@dataclass(frozen=True, kw_only=True)
class RecordResult:
    """Where the trace went and how the training ended."""

    run_dir: Path
    trace_path: Path
    status: str
    exit_code: int
    error: str | None
    steps_recorded: int
    workers_seen: int
    #: Training was stopped after the window and the reference steps (not --run-to-end).
    stopped_early: bool = False
    #: One trace per recorded rank, by rank (``trace_path`` is the first).
    trace_paths: tuple[Path, ...] = ()
    #: The manifest of each trace, in the order of ``trace_paths``, as written (redacted with ``--redact``).
    manifests: tuple[Manifest, ...] = ()
    #: ``--plain-launch``: what the plain launch did (where its steps went, or why there are none).
    plain_launch_note: str | None = None
