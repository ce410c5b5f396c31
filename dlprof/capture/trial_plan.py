"""What happens after the reference steps, decided once and followed by every rank: when the reference phase ends,
which DataLoader setting each stretch of the in-process trials (``dlprof record --try-workers``) trains at, and at
which step training stops.

Every rank of a job must switch its DataLoader and stop at the same step, or a collective waits forever for a rank
still at the previous step. The reference phase ends on a rule that reads clocks (enough steady steps and seconds,
:mod:`dlprof.core.throughput`), which ranks would not agree on; so one rank decides (rank 0, or the one process), writes
the :class:`Plan` into the session directory (:data:`PLAN_FILE`, replaced atomically) a few steps ahead
(:data:`RANK_MARGIN_STEPS`), and every other rank reads it at its step boundaries (one ``stat`` a step) and follows.
Ranks of a data-parallel job run in lockstep, one step apart at most, so the margin suffices; a rank that reads the
plan late switches at its next step and says so. A job over several machines has one session directory per
machine: there, each machine's first rank decides, by step counts alone, so that every machine decides alike.

Standard library only (and the bottom floor): planning is pure, and ``dlprof record`` checks the options with it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from dlprof.core import throughput
from dlprof.core.errors import UsageError
from dlprof.core.lenient import parse_dataclass
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, TRIM_MIN_PCT
from dlprof.results.record import THEN_STOP, TrialRequest

#: The plan, in the session directory.
PLAN_FILE = "plan.json"
#: Steps between the decision and the step it takes effect at, when several ranks run: data-parallel ranks are one
#: step apart at most (each step's all-reduce waits for all), so every rank has read the plan by then.
RANK_MARGIN_STEPS = 3
#: An IterableDataset switches only where an epoch starts, so its segments are whole epochs: epochs longer than this
#: many segments' worth of steps would make the trials too long, and they are not run.
MAX_EPOCH_SEGMENTS = 10
#: When no step time was measured (no reference steps), a segment's steps: throughput.MIN_STEPS.
FALLBACK_TRIAL_STEPS = throughput.MIN_STEPS


def request_from_config(config: dict | None) -> TrialRequest | None:
    """The trials asked for, from the session's config (None: none, or a config this dlprof did not write)."""
    if not config:
        return None
    request, _ = parse_dataclass(TrialRequest, config, "config.trials")
    return request


def parse_counts(text: str) -> tuple[int, ...]:
    """``--try-workers 0,1,2,4``: comma-separated whole numbers >= 0, distinct, at least one.

    Raises:
        UsageError: a one-line message naming the option, the problem and the fix.
    """
    try:
        counts = tuple(int(word) for word in text.split(","))
    except ValueError:
        raise UsageError(
            f"--try-workers {text!r}: give comma-separated whole numbers >= 0, e.g. --try-workers 0,1,2,4"
        ) from None
    negative = [c for c in counts if c < 0]
    if negative:
        raise UsageError(f"--try-workers {text!r}: {negative[0]} is negative; give num_workers values >= 0")
    if len(set(counts)) != len(counts):
        raise UsageError(f"--try-workers {text!r}: a count is given twice; give each num_workers once")
    return counts


def check_request(request: TrialRequest, run_to_end: bool, workload_steps: int | None = None) -> None:
    """Options that cannot go with the trials.

    Args:
        run_to_end: ``--run-to-end``: the script trains to its own end, so dlprof never gets the steps to try in.
        workload_steps: the built-in workload's ``--steps``, which makes it train to its end too.

    Raises:
        UsageError: one line naming the options and the fix.
    """
    if run_to_end:
        if request.then != THEN_STOP:
            raise UsageError(
                f"--then {request.then} with --run-to-end: --then {request.then} already trains to the end, after the"
                " trials; drop --run-to-end"
            )
        raise UsageError(
            "--try-workers with --run-to-end: the trials run after the reference steps, in the steps dlprof would"
            " stop; drop --run-to-end to try counts, or --try-workers to let your script train to its end"
        )
    if workload_steps is not None and request.then == THEN_STOP:
        raise UsageError(
            f"--try-workers with --steps {workload_steps}: the built-in workload then trains to its end; drop --steps"
            " (dlprof stops it once the trials are done)"
        )
    if request.rounds < 1:
        raise UsageError(f"--trial-rounds {request.rounds}: must be >= 1")
    if request.trial_steps is not None and request.trial_steps < 1:
        raise UsageError(f"--trial-steps {request.trial_steps}: must be >= 1 (steps timed per segment)")


def settings_order(counts: Sequence[int], persistent: bool) -> list[tuple[int, bool]]:
    """One round's settings, in the order asked: each count, and with ``persistent`` each count > 0 persistent too."""
    settings = []
    for count in counts:
        settings.append((count, False))
        if persistent and count > 0:
            settings.append((count, True))
    return settings


def rounds_order(counts: Sequence[int], persistent: bool, rounds: int) -> list[tuple[int, int, bool]]:
    """``(round, num_workers, persistent)`` of every segment: round 0 in the order asked, round 1 reversed, ..."""
    one = settings_order(counts, persistent)
    return [(r, n, p) for r in range(rounds) for n, p in (one if r % 2 == 0 else one[::-1])]


def prefetch_for(num_workers: int, own_prefetch: int | None) -> int | None:
    """The prefetch_factor a tried count gets: None without workers, else the script's own (or PyTorch's 2)."""
    if num_workers == 0:
        return None
    return own_prefetch or throughput.DEFAULT_PREFETCH_FACTOR


def queue_of(num_workers: int, own_prefetch: int | None, batches_per_step: float) -> int:
    """Steps that consume the queue of a tried count (its prefetch_factor: :func:`prefetch_for`)."""
    return throughput.queue_steps(num_workers, prefetch_for(num_workers, own_prefetch), batches_per_step)


def allowance_steps(
    num_workers: int, prefetch_factor: int | None, batches_per_step: float, previous_queue: int = 0
) -> int:
    """Steps a segment gives its refill transient before the timed steps (the analysis finds the real transient inside
    it): the settling after starting workers, and twice the surplus a switch leaves: the batches the previous setting
    had in flight (``previous_queue``, in steps), kept and served first, and the new setting's own queue, filled
    meanwhile.

    Twice, because the surplus is used up only as fast as training outruns the workers, and the transient ends only
    once every worker has waited (docs/ARCHITECTURE.md#facts-the-code-relies-on).
    """
    surplus = throughput.queue_steps(num_workers, prefetch_factor, batches_per_step) + previous_queue
    return 2 * surplus + EPOCH_SETTLE_STEPS


#: The shortest step the built-in workload is planned for when it makes room for the trials, s.
SHORTEST_STEP_S = 0.001


def steps_bound(request: TrialRequest, prefetch_factor: int | None = None, batches_per_step: float = 1.0) -> int:
    """At most how many steps the trials take (steps of :data:`SHORTEST_STEP_S` at least): the steps the built-in
    workload must be able to train on for them."""
    trial_steps = request.trial_steps or default_trial_steps(SHORTEST_STEP_S)
    order = rounds_order(request.counts, request.persistent, request.rounds)
    # Whatever came before a segment, at most the largest count's queue was in flight.
    most = max(queue_of(n, prefetch_factor, batches_per_step) for n in request.counts)
    segments = sum(allowance_steps(n, prefetch_for(n, prefetch_factor), batches_per_step, most) for _, n, _ in order)
    # ... and the padding segment, when the batches turn out to be padded past their longest sequence.
    padding = max(allowance_steps(n, prefetch_for(n, prefetch_factor), batches_per_step) for n in request.counts)
    return RANK_MARGIN_STEPS + segments + padding + (len(order) + 1) * trial_steps


def default_trial_steps(step_s: float | None, fastest_s: float | None = None, rounds: int = 1) -> int:
    """Steps timed per segment: throughput.MIN_STEPS, at least throughput.MIN_SECONDS at the measured step time, and
    enough that a setting training at ``fastest_s`` a step (the measured step without its data wait: no setting is
    faster) still makes throughput.MIN_SECONDS over all ``rounds``.

    The last rule is there because a count planned from a slow, input-bound recording would otherwise time the fast
    counts for too short a time to trust.
    """
    if not step_s or step_s <= 0:
        return FALLBACK_TRIAL_STEPS
    steps = max(throughput.MIN_STEPS, math.ceil(throughput.MIN_SECONDS / step_s))
    if fastest_s is not None and fastest_s > 0:
        steps = max(steps, math.ceil(throughput.MIN_SECONDS / max(1, rounds) / fastest_s))
    return steps


@dataclass(frozen=True, kw_only=True)
class LoaderFacts:
    """What planning knows of the training DataLoader."""

    num_workers: int
    prefetch_factor: int | None
    batches_per_step: float
    #: An IterableDataset: it switches only where an epoch starts.
    iterable: bool = False
    #: Steps per epoch, when known (the loader's length, or epoch starts seen), and the last step an epoch began in.
    epoch_steps: int | None = None
    last_epoch_start: int | None = None
    #: The share of the positions of its first batches that trimming to their longest real sequence would drop, %
    #: (:mod:`dlprof.capture.probe.trim`; 0: none, or the batches cannot be trimmed without changing the loss).
    trimmable_pct: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PlannedSegment:
    """One planned stretch of training at one setting; steps are counts of steps completed (the step clock's
    indices of the steps that follow)."""

    num_workers: int
    persistent_workers: bool
    prefetch_factor: int | None
    round: int
    #: Once this many steps are done, the switch to this setting is asked for.
    request_step: int
    #: Where it is planned to begin (the switch lands in this step), and its steps, refill allowance included.
    first_step: int
    steps: int
    #: It switches where an epoch begins (an IterableDataset).
    at_epoch_start: bool = False
    #: The padding segment: the previous segment's setting with batches trimmed to their longest real sequence.
    trim_padding: bool = False


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What every rank does after the reference steps."""

    #: The step the reference phase ends at (steps from here on are the trials'), and the step training stops at.
    trials_start: int
    stop_step: int
    #: The step the deciding rank decided at, and that rank.
    decided_at: int
    decided_by: int
    trial_steps: int = 0
    segments: tuple[PlannedSegment, ...] = ()
    #: Why the trials asked for do not run (None: they run, or none were asked for).
    skipped: str | None = None


def _epoch_segments(
    order: list[tuple[int, int, bool]], facts: LoaderFacts, own_prefetch: int | None, start: int, trial_steps: int
) -> tuple[tuple[PlannedSegment, ...], int] | str:
    """Segments of whole epochs (an IterableDataset), and the stop step; or why they cannot be planned."""
    epoch, last = facts.epoch_steps, facts.last_epoch_start
    if not epoch or last is None:
        return (
            "the training DataLoader's IterableDataset switches worker settings only where an epoch starts, and no"
            " epoch ended during the reference steps (its length is unknown)"
        )
    longest = max(allowance_steps(n, prefetch_for(n, own_prefetch), facts.batches_per_step) for _, n, _ in order)
    if epoch > MAX_EPOCH_SEGMENTS * (longest + trial_steps):
        return (
            f"the training DataLoader's IterableDataset switches worker settings only where an epoch starts, and its"
            f" epochs of {epoch} steps would make each segment {epoch} steps long; lower --trial-steps will not help:"
            " try the counts with dlprof sweep --launches instead"
        )
    per_segment = math.ceil((longest + trial_steps) / epoch)  # whole epochs
    first = last + max(1, math.ceil((start - last) / epoch)) * epoch  # the first epoch start from `start` on
    segments = []
    for i, (round_, n, persistent) in enumerate(order):
        begins = first + i * per_segment * epoch
        request = start if i == 0 else begins - max(1, epoch // 2)
        segments.append(
            PlannedSegment(
                num_workers=n,
                persistent_workers=persistent,
                prefetch_factor=prefetch_for(n, own_prefetch),
                round=round_,
                request_step=request,
                first_step=begins,
                steps=per_segment * epoch,
                at_epoch_start=True,
            )
        )
    return tuple(segments), first + len(order) * per_segment * epoch


def plan_trials(
    request: TrialRequest | None,
    facts: LoaderFacts | None,
    start: int,
    step_s: float | None,
    decided: tuple[int, int],
    deterministic: bool = False,
    fastest_s: float | None = None,
) -> Plan:
    """The plan from ``start`` (steps done when the reference phase ends): the trials' segments and the stop step.

    Args:
        facts: the training loader (None: no DataLoader trained, so nothing to try).
        step_s: the measured unprofiled step time (None: unknown), for the default ``--trial-steps``.
        decided: the step the decision was taken at, and the deciding rank.
        deterministic: decide by step counts alone (each machine of a multi-machine job decides for itself).
        fastest_s: the measured step time without its data wait (None: unknown), for the default ``--trial-steps``.
    """
    at, rank = decided
    if request is None:
        return Plan(trials_start=start, stop_step=start, decided_at=at, decided_by=rank)
    trial_steps = request.trial_steps or (
        FALLBACK_TRIAL_STEPS if deterministic else default_trial_steps(step_s, fastest_s, request.rounds)
    )
    if facts is None:
        return Plan(
            trials_start=start,
            stop_step=start,
            decided_at=at,
            decided_by=rank,
            trial_steps=trial_steps,
            skipped="no DataLoader was iterated: none could be switched",
        )
    order = rounds_order(request.counts, request.persistent, request.rounds)
    if facts.iterable:
        planned = _epoch_segments(order, facts, facts.prefetch_factor, start, trial_steps)
        if isinstance(planned, str):
            return Plan(
                trials_start=start,
                stop_step=start,
                decided_at=at,
                decided_by=rank,
                trial_steps=trial_steps,
                skipped=planned,
            )
        epoch_segments, stop = planned
        epoch_segments, stop = _with_padding_segment(epoch_segments, stop, facts, trial_steps)
        return Plan(
            trials_start=start,
            stop_step=stop,
            decided_at=at,
            decided_by=rank,
            trial_steps=trial_steps,
            segments=epoch_segments,
        )
    segments: list[PlannedSegment] = []
    step, previous = start, facts.num_workers
    for round_, n, persistent in order:
        prefetch = prefetch_for(n, facts.prefetch_factor)
        kept = queue_of(previous, facts.prefetch_factor, facts.batches_per_step)
        steps = allowance_steps(n, prefetch, facts.batches_per_step, kept) + trial_steps
        segments.append(
            PlannedSegment(
                num_workers=n,
                persistent_workers=persistent,
                prefetch_factor=prefetch,
                round=round_,
                request_step=step,
                first_step=step,
                steps=steps,
            )
        )
        step, previous = step + steps, n
    planned_segments, stop = _with_padding_segment(tuple(segments), step, facts, trial_steps)
    return Plan(
        trials_start=start,
        stop_step=stop,
        decided_at=at,
        decided_by=rank,
        trial_steps=trial_steps,
        segments=planned_segments,
    )


def _with_padding_segment(
    segments: tuple[PlannedSegment, ...], stop: int, facts: LoaderFacts, trial_steps: int
) -> tuple[tuple[PlannedSegment, ...], int]:
    """``segments`` and the stop step, with the padding segment after the last one when the batches are padded past
    their longest sequence (:data:`TRIM_MIN_PCT`): the last setting again, no switch of workers, as long as a segment
    of that setting (whole epochs for an IterableDataset, so that its speed is measured as the setting's was)."""
    if not segments or facts.trimmable_pct < TRIM_MIN_PCT:
        return segments, stop
    last = segments[-1]
    steps = (
        last.steps
        if last.at_epoch_start
        else allowance_steps(last.num_workers, last.prefetch_factor, facts.batches_per_step) + trial_steps
    )
    padding = PlannedSegment(
        num_workers=last.num_workers,
        persistent_workers=last.persistent_workers,
        prefetch_factor=last.prefetch_factor,
        round=last.round,
        request_step=stop,
        first_step=stop,
        steps=steps,
        trim_padding=True,
    )
    return (*segments, padding), stop + steps


def describe(request: TrialRequest, plan: Plan, step_s: float | None) -> str:
    """What the trials will do and how long they take: the line printed before they start."""
    persistent = [str(c) for c in request.counts if c > 0] if request.persistent else []
    also = f" (and {','.join(persistent)} with persistent workers)" if persistent else ""
    per_round = len(settings_order(request.counts, request.persistent))
    steps = plan.stop_step - plan.trials_start
    each = round(sum(s.steps for s in plan.segments) / max(1, len(plan.segments)))
    seconds = f": ~{_duration(steps * step_s)}" if step_s else ""
    rounds = f"{request.rounds} round{'s' if request.rounds != 1 else ''}"
    where = ", switching where epochs start" if any(s.at_epoch_start for s in plan.segments) else ""
    padding = (
        ", then one with batches trimmed to their longest sequence (they are padded past it)"
        if any(s.trim_padding for s in plan.segments)
        else ""
    )
    return (
        f"dlprof: trying num_workers {','.join(map(str, request.counts))}{also} in {rounds} of {per_round}"
        f" segment{'s' if per_round != 1 else ''}, about {each} steps each{where}{padding}{seconds}"
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def write_json(path: Path, document: dict) -> None:
    """Publish ``document`` for the other ranks (written whole, then renamed: a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    """A document :func:`write_json` published (None: not there yet, or unreadable)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def write_plan(session_dir: Path, plan: Plan) -> None:
    """Publish the plan for every rank."""
    write_json(session_dir / PLAN_FILE, asdict(plan))


def plan_published(session_dir: Path) -> bool:
    """Whether the deciding rank has published its plan (one ``stat``: cheap enough for every step)."""
    return os.path.exists(session_dir / PLAN_FILE)


def read_plan(session_dir: Path) -> Plan | None:
    """The published plan (None: none, or unreadable)."""
    document = read_json(session_dir / PLAN_FILE)
    if document is None:
        return None
    plan, _ = parse_dataclass(Plan, document, "plan")
    return plan
