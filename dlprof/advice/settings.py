"""The settings beside num_workers: pin_memory, prefetch_factor and persistent_workers, each with the numbers from the
run that justify it; the tokenizer's share of a batch; and the advice as a Trainer's arguments.
:mod:`dlprof.advice.rules` calls these once it has chosen the count."""

from __future__ import annotations

from dlprof.advice.measured import persistent_comparison
from dlprof.advice.model import ModelInputs
from dlprof.core.manifest import LoaderConfig, Manifest
from dlprof.results.advice import Advice, Prediction
from dlprof.results.analysis import GpuStats, LoaderStats, StepBreakdown
from dlprof.results.trials import TrialsResult

#: Bursty supply: p90 wait at least this multiple of the mean wait ...
BURSTY_P90_OVER_MEAN = 2.0
#: ... and at least this share of the step, while average supply keeps up.
BURSTY_P90_PCT = 5.0
#: prefetch_factor to suggest for bursty supply (PyTorch's default is 2).
BURSTY_PREFETCH_FACTOR = 4
#: The tokenizer "dominates" loading above this share of a batch's wall time.
TOKENIZER_DOMINANT_PCT = 50.0
#: Advise persistent_workers when restarting workers costs at least this share of whole-epoch throughput.
PERSISTENT_WORKERS_MIN_LOSS_PCT = 1.0


#: :func:`persistent_from_trials` found nothing to go on: the model's rule decides.
UNDECIDED = object()


def persistent_from_trials(
    trials: TrialsResult | None, num_workers: int | None, config: LoaderConfig | None, evidence: list[str]
):
    """persistent_workers as the trials measured it at the recommended count (``--try-persistent``), or
    :data:`UNDECIDED`."""
    if trials is None or not num_workers:
        return UNDECIDED
    compared = persistent_comparison(trials, num_workers, PERSISTENT_WORKERS_MIN_LOSS_PCT)
    if compared is None:
        return UNDECIDED
    keep, line = compared
    evidence.append(line)
    was = bool(config is not None and config.persistent_workers)
    return None if keep is None or keep == was else keep


def tokenizer_evidence(loader: LoaderStats | None) -> list[str]:
    """Pre-tokenizing, when the tokenizer dominates a batch's cost."""
    if loader is None or loader.batch.mean_ms <= 0:
        return []
    share = 100 * loader.tokenize.mean_ms / loader.batch.mean_ms
    if share <= TOKENIZER_DOMINANT_PCT:
        return []
    return [
        f"the tokenizer takes {loader.tokenize.mean_ms:.2f} of {loader.batch.mean_ms:.2f} ms per batch"
        f" ({share:.0f} %): pre-tokenize the dataset once (e.g. datasets.map) and load token ids"
    ]


def trainer_arguments(advice: Advice, config: LoaderConfig | None) -> str | None:
    """The advice as the ``TrainingArguments`` to set, for a DataLoader a training framework created
    (``config.created_by``).

    Hugging Face's Trainer builds its DataLoader from ``--dataloader_num_workers``, ``--dataloader_pin_memory``,
    ``--dataloader_persistent_workers`` and ``--dataloader_prefetch_factor``; ms-swift and LLaMA-Factory
    take the same arguments. Built from the recommendation's own settings only, so the two always agree;
    settings it leaves unchanged (``None``) are left out; None when nothing is advised.
    """
    if config is None or config.created_by is None:
        return None
    words = []
    if advice.num_workers is not None:
        words.append(f"--dataloader_num_workers {advice.num_workers}")
    if advice.pin_memory is not None:
        words.append(f"--dataloader_pin_memory {str(advice.pin_memory).lower()}")
    if advice.persistent_workers is not None:
        words.append(f"--dataloader_persistent_workers {str(advice.persistent_workers).lower()}")
    if advice.prefetch_factor is not None:
        words.append(f"--dataloader_prefetch_factor {advice.prefetch_factor}")
    return " ".join(words) or None


def pin_memory_setting(gpu: GpuStats | None, config: LoaderConfig | None, evidence: list[str]) -> bool | None:
    if gpu is None:
        if config is not None and config.pin_memory:
            evidence.append("pin_memory=True has no effect without a GPU: turn it off")
            return False
        return None
    if gpu.h2d_pageable_copies:
        evidence.append(
            f"{gpu.h2d_pageable_copies} of {gpu.h2d_copies} host-to-device copies are from pageable memory"
            f" ({gpu.h2d.mean_ms:.2f} ms, {gpu.h2d_mib_per_step:.1f} MiB per step): pin_memory=True makes them"
            " asynchronous and faster"
        )
        return True
    return True if gpu.h2d_pinned_copies else None


def prefetch_factor_setting(
    steps: StepBreakdown, inputs: ModelInputs | None, num_workers: int | None, evidence: list[str]
) -> int | None:
    wait = steps.categories["data_wait"]
    if not num_workers or inputs is None or wait.mean_ms <= 0:
        return None
    supply_ok = inputs.batches_per_step * inputs.batch_ms / num_workers <= inputs.consumer_ms
    bursty = (
        wait.p90_ms >= BURSTY_P90_OVER_MEAN * wait.mean_ms and 100 * wait.p90_ms / steps.step.mean_ms >= BURSTY_P90_PCT
    )
    if supply_ok and bursty:
        evidence.append(
            f"waits are bursty (p90 {wait.p90_ms:.2f} ms vs mean {wait.mean_ms:.2f} ms) although supply keeps up on"
            f" average: prefetch_factor={BURSTY_PREFETCH_FACTOR} buffers more batches per worker"
        )
        return BURSTY_PREFETCH_FACTOR
    return None


def persistent_workers_setting(
    manifest: Manifest | None,
    config: LoaderConfig | None,
    inputs: ModelInputs | None,
    predicted: list[Prediction],
    num_workers: int | None,
    evidence: list[str],
) -> bool | None:
    """persistent_workers=True when workers restart every epoch and that costs measurable time; False when no
    workers are advised for a loader that had persistent ones (PyTorch rejects persistent_workers=True without
    workers)."""
    if num_workers == 0 and config is not None and config.persistent_workers:
        evidence.append(
            "the run had persistent_workers=True, which PyTorch refuses without workers: with num_workers=0, set"
            " persistent_workers=False"
        )
        return False
    if not num_workers or config is None or config.persistent_workers is not False:
        return None
    chosen = predicted[num_workers] if num_workers < len(predicted) else None
    if chosen is not None and chosen.epoch_steps_per_s is not None and inputs is not None and inputs.epoch is not None:
        # The restarts' share of an epoch's time: the whole-epoch anchor scales both sides alike.
        epoch_ms = inputs.epoch.steps_per_epoch * chosen.step_ms + chosen.restart_ms
        loss_pct = 100 * chosen.restart_ms / epoch_ms
        if loss_pct < PERSISTENT_WORKERS_MIN_LOSS_PCT:
            return None
        how = "measured" if inputs.epoch.restart_measured_ms is not None else "estimated"
        kept = chosen.epoch_steps_per_s * epoch_ms / (epoch_ms - chosen.restart_ms)
        evidence.append(
            f"workers restart at every epoch ({inputs.epoch.steps_per_epoch:g} steps): {chosen.restart_ms:.0f} ms per"
            f" restart ({how}) makes training {loss_pct:.1f} % slower over whole epochs ({chosen.epoch_steps_per_s:.2f}"
            f" instead of {kept:.2f} steps/s); persistent_workers=True keeps them"
        )
        return True
    starts = manifest.workers if manifest else ()
    epochs = {w.epoch for w in starts}
    if len(epochs) > 1:
        evidence.append(
            f"workers were started {len(starts)} times over {len(epochs)} epochs: persistent_workers=True keeps them"
        )
        return True
    if config.iterations > 1:
        evidence.append(
            f"the loader was iterated {config.iterations} times, restarting its workers each time:"
            " persistent_workers=True keeps them"
        )
        return True
    return None
