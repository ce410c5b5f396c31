"""What the advice stage found (dlprof.advice builds these): the recommendation, its evidence and its predictions."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlprof.results.findings import Finding

#: What a recommended ``num_workers`` rests on (:attr:`Advice.rests_on`): tried in the running training, or the model.
RESTS_ON_MEASURED = "measured"
RESTS_ON_PREDICTED = "predicted"

#: What a report's first line says (:attr:`Headline.kind`): a change that pays, no change, or no recommendation at all.
HEADLINE_CHANGE = "change"
HEADLINE_KEEP = "keep"
HEADLINE_NONE = "none"


@dataclass(frozen=True, kw_only=True)
class Headline:
    """The answer first: what to change, what it buys and what that rests on, in one line that every report leads with
    (dlprof.advice.headline builds it; renderers print ``text``)."""

    text: str
    #: The settings to change (``"num_workers 2 -> 0, persistent_workers False -> True"``); None: keep them, or no
    #: recommendation.
    change: str | None
    #: How much faster the change makes training, % of the recorded setting's speed (negative: slower); None when
    #: unknown or nothing changes.
    gain_pct: float | None
    #: :data:`RESTS_ON_MEASURED` or :data:`RESTS_ON_PREDICTED`, or ``"up to"`` (an upper bound) when a finding leads the
    #: line (:data:`dlprof.results.findings.GAIN_BASES`); None when nothing was advised.
    basis: str | None
    #: :data:`HEADLINE_CHANGE`, :data:`HEADLINE_KEEP` or :data:`HEADLINE_NONE`.
    kind: str = HEADLINE_CHANGE
    #: The fact the gain comes from (what restarting workers costs, what binds at the recorded count); None when none
    #: applies.
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Predicted speed at one ``num_workers``, and the bound that sets it."""

    num_workers: int
    step_ms: float  # a step inside an epoch (steady state)
    steps_per_s: float
    bound: str  # "consumer" | "loader" | "cpu" | "contention" | "main process"
    #: Steps/s over whole epochs, worker restarts included (None when the epoch length is unknown).
    epoch_steps_per_s: float | None = None
    restart_ms: float = 0.0  # per epoch

    @property
    def effective_steps_per_s(self) -> float:
        """What training gets: over whole epochs when known, else steady state."""
        return self.epoch_steps_per_s if self.epoch_steps_per_s is not None else self.steps_per_s


@dataclass(frozen=True, kw_only=True)
class Advice:
    """The recommendation, its evidence and the predictions behind it. ``None`` means unknown or no change."""

    verdict: str  # "HIGHLY" | "MODERATELY" | "NOT" (input-bound)
    num_workers: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    bound: str | None
    predicted: list[Prediction]
    evidence: list[str]
    basis: list[str] = field(default_factory=list)  # what the advice rests on, and what was unknown
    #: The recommendation as Hugging Face ``TrainingArguments`` (``--dataloader_num_workers 2 ...``), when a
    #: Trainer (or ms-swift, LLaMA-Factory, which take the same arguments) created the DataLoader; else None.
    #: Built from the settings above only, so that it always says what they say.
    trainer_arguments: str | None = None
    #: What the recommended ``num_workers`` rests on: ``"measured"`` (it was tried in the running training and
    #: came within reach of the best measured) or ``"predicted"`` (the throughput model, between and beyond the
    #: settings tried, or for a run without trials).
    rests_on: str = RESTS_ON_PREDICTED
    #: Which speeds the recommendation compared (:data:`dlprof.results.trials.BASIS_WHOLE_EPOCHS`, worker restarts
    #: included, or :data:`~dlprof.results.trials.BASIS_IN_EPOCH`); None when nothing was compared.
    compared_on: str | None = None
    #: The num_workers the throughput model alone recommends (its predictions, the trials left out): what
    #: ``dlprof sweep`` checks against measurement. Equal to ``num_workers`` for a run without trials.
    model_num_workers: int | None = None
    #: The report's first line, made from the recommendation above and the run's recorded settings (None: not made,
    #: e.g. an Advice built by hand).
    headline: Headline | None = None
    #: Faults of the input pipeline beyond these settings (padding, sharding, shared memory, threads, ...), the largest
    #: gain first (dlprof.advice.findings).
    findings: tuple[Finding, ...] = ()
