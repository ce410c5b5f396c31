"""Labels and number formatting shared by the renderers (formatting only, no computation)."""
from __future__ import annotations

CATEGORY_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device copies",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other",
}
UNKNOWN = "unknown"
KEEP = "keep"


def ms(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.2f}"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}" if whole else "-"


def setting(value: object) -> str:
    """A recommended setting: the value, or 'keep' when no change is advised."""
    return KEEP if value is None else str(value)


def known(value: object) -> str:
    return UNKNOWN if value is None else str(value)


def run_line(info) -> str:
    gpu = f", GPU {info.gpu_name}" if info.gpu_name else ""
    cores = f", {info.usable_cores} usable cores" if info.usable_cores else ""
    return (
        f"{info.device}{gpu}, num_workers={known(info.num_workers)}, batch_size={known(info.batch_size)}, "
        f"pin_memory={known(info.pin_memory)}, prefetch_factor={known(info.prefetch_factor)}, "
        f"persistent_workers={known(info.persistent_workers)}{cores}"
    )


def verdict_line(run) -> str:
    steps = run.steps
    return (
        f"{run.advice.verdict} input-bound: waiting for data {steps.categories['data_wait'].mean_ms:.2f} ms "
        f"of a {steps.step.mean_ms:.2f} ms step ({steps.data_wait_pct:.1f} %)"
    )


def recommendation_line(advice) -> str:
    return (
        f"num_workers={setting(advice.num_workers)}  pin_memory={setting(advice.pin_memory)}  "
        f"prefetch_factor={setting(advice.prefetch_factor)}  persistent_workers={setting(advice.persistent_workers)}"
        + (f"  (bound by {advice.bound})" if advice.bound else "")
    )
