"""The training's speed without the profiler as every report format prints it: the unprofiled speed, a plain launch
against it, the epochs, and the page faults it may rest on."""

from __future__ import annotations

from dlprof.results.report import RunReport


def unprofiled_line(run: RunReport) -> str | None:
    """Your training's speed without the profiler, and what profiling cost; None without reference steps."""
    u = run.unprofiled
    if u is None:
        return None
    line = f"without the profiler: {u.steps_per_s:.2f} steps/s ({u.step_ms:.2f} ms per step)"
    speed = u.speed
    if speed is None:
        line += f", mean of {u.reference_steps} reference steps"
    else:
        left_out = f", {speed.transient_steps} left out after pauses" if speed.transient_steps else ""
        line += (
            f" over {speed.steps} steady reference steps ({duration(speed.seconds)}{left_out}), spread"
            f" {speed.spread_pct:.1f} %"
        )
    if u.distrust:
        line += f"; not to be trusted: {u.distrust}"
    if u.overhead_pct is not None:
        line += (
            f"; profiling made steps {u.overhead_pct:.0f} % slower: {u.profiled_step_ms:.2f} ms profiled vs"
            f" {u.step_ms_p50:.2f} ms unprofiled (medians)"
        )
    return line


def plain_launch_line(run: RunReport) -> str | None:
    """The reference steps in a launch without the profiler (``dlprof record --plain-launch``): what recording changed
    in them; None without one."""
    plain = run.unprofiled.plain_launch if run.unprofiled else None
    if plain is None:
        return None
    line = (
        f"a plain launch of the same command ran the same {plain.steps} steady steps at {plain.plain_steps_per_s:.2f}"
        f" steps/s, the recording at {plain.recorded_steps_per_s:.2f}: recording changed them by"
        f" {plain.after_effect_pct:+.1f} %"
    )
    if plain.epoch_after_effect_pct is not None:
        line += (
            f"; over {plain.epoch_steps} steps of whole epochs {plain.plain_epoch_steps_per_s:.2f} against"
            f" {plain.recorded_epoch_steps_per_s:.2f} steps/s ({plain.epoch_after_effect_pct:+.1f} %)"
        )
    return line + "; the predictions are the plain launch's"


#: What steadies glibc's malloc (a level of page faults per process, by chance): fixed thresholds.
FIXED_MALLOC = "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824"


def page_faults_line(run: RunReport) -> str | None:
    """The main process's page faults, when so much of its step goes to them that its speed rests on the level glibc's
    malloc settled on in this process (:class:`dlprof.results.analysis.PageFaults`); None otherwise."""
    faults = run.unprofiled.page_faults if run.unprofiled else None
    if faults is None or not faults.volatile:
        return None
    before = (
        ""
        if faults.before_faults_per_step is None
        else f" (before the window: at least {faults.before_faults_per_step:,.0f} and {faults.before_sys_ms:.1f} ms)"
    )
    return (
        f"the main process took {faults.faults_per_step:,.0f} page faults per step, {faults.sys_ms:.1f} ms of kernel"
        f" time ({faults.sys_pct:.0f} % of the step){before}: glibc's malloc maps and unmaps the step's memory at a"
        " level each process settles on by chance (a profiler window can lower it), so a launch of this training may"
        f" run faster or slower by up to that share; {FIXED_MALLOC} in the environment (or jemalloc) steadies it and"
        " saves most of that time"
    )


def duration(seconds: float) -> str:
    """``seconds`` as "4.1 s", or "2.4 ms" under a second."""
    return f"{seconds:.1f} s" if seconds >= 1 else f"{1000 * seconds:.1f} ms"


def epoch_line(run: RunReport) -> str | None:
    """Epoch boundaries of the training loader, when known."""
    epoch = run.unprofiled.epoch if run.unprofiled else None
    if epoch is None or epoch.steps_per_epoch is None:
        return None
    restart = (
        "no boundary timed after start-up"
        if epoch.restart_ms is None
        else f"a boundary costs {epoch.restart_ms:.0f} ms (measured over {epoch.boundaries_measured})"
    )
    workers = (
        "persistent workers"
        if epoch.persistent_workers
        else "workers restart each epoch"
        if epoch.num_workers
        else "no workers"
    )
    first = (
        ""
        if epoch.first_batch_ms is None
        else f"; first batch {epoch.first_batch_ms:.1f} ms after the iterator was created"
    )
    whole = epoch.whole_epoch_speed
    timed = (
        ""
        if whole is None
        else f"; over {whole.steps} steps of whole epochs ({duration(whole.seconds)}): {whole.steps_per_s:.2f} steps/s,"
        f" spread {whole.spread_pct:.1f} %"
    )
    return f"epochs: {epoch.steps_per_epoch:g} steps each, {workers}; {restart}{first}{timed}"
