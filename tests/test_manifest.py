"""The manifest: one typed, versioned dataclass, parsed once where a trace is read."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing

import pytest
from conftest import DATA_DIR

from dlprof.core import schema
from dlprof.core.lenient import MAX_NESTING
from dlprof.core.manifest import MANIFEST_VERSION, BatchFacts, Manifest, StepClock, parse_manifest


def _fixture_manifest() -> dict:
    return json.loads((DATA_DIR / "tiny_dlprof_trace.json").read_text())[schema.MANIFEST_KEY]


def test_a_written_manifest_reads_back_unchanged():
    manifest, problems = parse_manifest(_fixture_manifest())
    assert problems == () and manifest.manifest_version == 2 < MANIFEST_VERSION  # an older version reads as it is
    assert (
        manifest.loader.num_workers == 1
        and manifest.loader.length == 16
        and manifest.host.worker_startup.per_worker_ms == 20.0
    )
    assert manifest.step_clock.phase[:6] == ("before",) * 5 + ("profiled",) and len(manifest.step_clock) == 14
    again, problems = parse_manifest(json.loads(json.dumps(manifest.to_dict())))
    assert problems == () and again == manifest


def test_wrong_typed_fields_are_unknown_and_named():
    document = _fixture_manifest()
    document["host"]["usable_cores"] = "four"
    document["loader"] = [1, 2]
    document["host"]["handoff"] = {"per_batch_ms": float("nan"), "per_tensor_ms": 0.1}
    manifest, problems = parse_manifest(document)
    assert manifest.host.usable_cores is None and manifest.loader is None and manifest.host.handoff is None
    assert manifest.host.ram_total_mib == 32000  # the rest is kept
    assert any("manifest.host.usable_cores = 'four' is not a valid int: read as unknown" in p for p in problems)
    assert any("manifest.loader is not an object" in p for p in problems)
    assert any("manifest.host.handoff.per_batch_ms" in p for p in problems)


def test_step_clock_columns_of_different_lengths_are_unknown():
    document = _fixture_manifest()
    document["step_clock"]["wall_ms"] = document["step_clock"]["wall_ms"][:3]
    manifest, problems = parse_manifest(document)
    assert manifest.step_clock == StepClock() and any("step_clock columns differ" in p for p in problems)


def test_an_older_version_is_read_and_said_to_lack_unprofiled_times():
    document = _fixture_manifest()
    document["manifest_version"] = 1
    del document["step_clock"]
    manifest, problems = parse_manifest(document)
    assert manifest.loader.num_workers == 1 and len(manifest.step_clock) == 0
    assert len(problems) == 1 and "manifest version 1" in problems[0] and "no unprofiled step times" in problems[0]


def test_an_unknown_version_is_reported_not_guessed():
    manifest, problems = parse_manifest({**_fixture_manifest(), "manifest_version": MANIFEST_VERSION + 1})
    assert manifest is None and "upgrade dlprof" in problems[0]
    manifest, problems = parse_manifest({"manifest_version": "two"})
    assert manifest is None and "is not one this dlprof reads" in problems[0]
    assert parse_manifest(None) == (None, ()) and parse_manifest([1])[0] is None


def test_a_missing_required_field_drops_the_manifest():
    manifest, problems = parse_manifest({"manifest_version": MANIFEST_VERSION, "loader": {"num_workers": 2}})
    assert manifest is not None and manifest.loader is None  # a loader without its id is unknown
    assert isinstance(manifest, Manifest) and any("has no id" in p for p in problems)


def test_trials_read_back_unchanged():
    document = {**_fixture_manifest(), "manifest_version": MANIFEST_VERSION}
    document["trials"] = {
        "counts": [0, 2],
        "rounds": 2,
        "trial_steps": 40,
        "loader": 0,
        "segments": [
            {"num_workers": 0, "persistent_workers": False, "round": 0, "first_step": 8, "steps": 3},
            {
                "num_workers": 2,
                "persistent_workers": False,
                "round": 0,
                "first_step": 11,
                "steps": 3,
                "drain_ms": 0.0,
                "shutdown_ms": 0.0,
                "start_ms": 12.5,
                "first_batch_ms": 40.0,
            },
        ],
    }
    manifest, problems = parse_manifest(document)
    assert problems == () and manifest.trials.counts == (0, 2) and manifest.trials.segments[1].first_batch_ms == 40.0
    again, problems = parse_manifest(json.loads(json.dumps(manifest.to_dict())))
    assert problems == () and again == manifest


# --- NaN, infinity and deep nesting: never kept, never quoted ---------------------------------------------------

#: Non-finite numbers as a trace can spell them (text; JSON has no NaN) and as ``json.loads`` returns its NaN literal.
NON_FINITE = ["NaN", "-Infinity", " inf ", float("nan"), float("-inf")]
#: How a report must never print a number (the fuzz suite's rule, tests/test_fuzz_analyze.py).
NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?!\w)", re.IGNORECASE)


def _full_manifest() -> dict:
    """The fixture's manifest with every optional part present, so that every numeric field has a parent."""
    document = {**_fixture_manifest(), "manifest_version": MANIFEST_VERSION}
    document["loaders"] = [copy.deepcopy(document["loader"])]
    document["memory"]["processes"] = [
        {"pid": 1, "role": "main", "first_sample_ns": 1, "sample_ms": [0.0], "uss_mib": [1.0]}
    ]
    columns = ("loader", "epoch", "batch", "worker", "made_ns", "rows", "width", "real_tokens", "longest", "nbytes")
    document["batches"] = {name: [1] for name in columns} | {"fingerprint": ["ab"]}
    document["host"]["gpu"] = {"name": "GPU"}
    segment = {"num_workers": 0, "persistent_workers": False, "round": 0, "first_step": 8, "steps": 3}
    segment["worker_pids"] = [7]
    then = {"mode": "best", "trials_end_step": 11, "num_workers": 2, "prefetch_factor": 2, "first_step": 12}
    document["trials"] = {"counts": [0, 2], "rounds": 1, "trial_steps": 3, "segments": [segment], "then": then}
    steps = len(document["step_clock"]["phase"])
    document["step_clock"].update(ready=[1] * steps, faults=[2_000] * steps, sys_ms=[4.5] * steps)
    document["step_clock"].update(wait_others_cpu_ms=[0.5] * steps, thread_cpu_ms=[3.0] * steps)
    return document


def _numeric_fields(cls: type, where: str) -> list[tuple[str, str]]:
    """Every int and float field of ``cls`` (the first entry of each list), as (path, type name)."""
    found = []
    for name, hint in typing.get_type_hints(cls).items():
        inner = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if typing.get_args(hint) else hint
        path = f"{where}.{name}"
        if typing.get_origin(hint) is tuple or typing.get_origin(inner) is tuple:
            item = typing.get_args(inner if typing.get_origin(inner) is tuple else hint)[0]
            if dataclasses.is_dataclass(item):
                found += _numeric_fields(item, f"{path}[0]")
            elif item in (int, float):
                found.append((f"{path}[0]", item.__name__))
        elif dataclasses.is_dataclass(inner):
            found += _numeric_fields(inner, path)
        elif inner in (int, float):
            found.append((path, inner.__name__))
    return found


NUMERIC_FIELDS = [f for f in _numeric_fields(Manifest, "manifest") if f[0] != "manifest.manifest_version"]


def _set(document: dict, path: str, value) -> None:
    node = document
    *parents, last = re.findall(r"\w+|\[0\]", path.removeprefix("manifest."))
    for key in parents:
        node = node[0] if key == "[0]" else node[key]
    if last == "[0]":
        node[0] = value
    else:
        node[last] = value


def test_every_numeric_field_is_covered():
    assert len(NUMERIC_FIELDS) > 80 and ("manifest.steps.run", "int") in NUMERIC_FIELDS
    for path, _ in NUMERIC_FIELDS:
        _set(_full_manifest(), path, 1)  # every path has its parent


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
@pytest.mark.parametrize(("path", "kind"), NUMERIC_FIELDS, ids=[p for p, _ in NUMERIC_FIELDS])
def test_a_non_finite_number_in_any_numeric_field_is_unknown_and_never_printed(path, kind, value):
    """A NaN or infinity, as text or as a number, is read as unknown (or its entry skipped), and the problem names the
    field without quoting the value: no report prints NaN, not even as the bad value a problem names."""
    document = _full_manifest()
    _set(document, path, value)
    manifest, problems = parse_manifest(document)
    said = "is text naming a non-finite number" if isinstance(value, str) else "is a non-finite number"
    expected = f"{path} {said}, not a valid {kind}: "
    assert any(p.startswith(expected) and p.endswith(("read as unknown", "entry skipped")) for p in problems), problems
    assert not any(NOT_A_NUMBER.search(p) for p in problems), problems
    kept = json.dumps(manifest.to_dict(), allow_nan=False)  # no non-finite number kept
    assert not NOT_A_NUMBER.search(kept)


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_a_non_finite_version_is_not_quoted(value):
    manifest, problems = parse_manifest({**_fixture_manifest(), "manifest_version": value})
    said = "text naming a non-finite number" if isinstance(value, str) else "a non-finite number"
    fix = "record the run again with this dlprof"
    assert manifest is None and problems == (
        f"manifest version ({said}) is not one this dlprof reads (1, 2, 3, 4, 5, 6, 7, 8): analysed as a trace without"
        f" dlprof's manifest; {fix}",
    )


def test_non_finite_versions_and_free_form_values_are_unknown():
    document = _fixture_manifest()
    document["dlprof_version"] = "NaN"
    document["host"]["gpu"] = {"name": "GPU", "cuda": "Infinity", "hip": "6.1"}
    document["versions"] = {"torch": "NaN", "python": float("inf"), "numpy": 2, "msgspec": [1], "peft": "0.13"}
    document["clock"] = {"offset_ns": float("nan")}
    document["overrides"] = {"num_workers": "-Infinity"}
    manifest, problems = parse_manifest(document)
    assert manifest.dlprof_version is None and manifest.host.gpu.cuda is None and manifest.host.gpu.hip == "6.1"
    assert manifest.versions == {"numpy": "2", "peft": "0.13"} and manifest.clock == {} and manifest.overrides == {}
    assert problems == (
        "manifest.dlprof_version is text naming a non-finite number, not a valid str: read as unknown",
        "manifest.host.gpu.cuda is text naming a non-finite number, not a valid str: read as unknown",
        "manifest.versions.torch is text naming a non-finite number, not a valid str: entry skipped",
        "manifest.versions.python is a non-finite number, not a valid str: entry skipped",
        "manifest.versions.msgspec = '[1]' is not a valid str: entry skipped",
        "manifest.clock holds a non-finite number: read as unknown",
        "manifest.overrides holds text naming a non-finite number: read as unknown",
    )


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_free_form_values_nest_at_most_max_nesting_levels():
    """``clock`` and ``overrides`` keep what nests MAX_NESTING levels (the object itself counted) and read one level
    more as unknown; 100,000 levels (no parser reads that, but ``build_run`` takes dicts) is no RecursionError, and
    neither is a deep value where a number is due."""
    assert MAX_NESTING == 32
    document = _fixture_manifest()
    document["clock"] = {"a": _nested(MAX_NESTING - 1)}
    document["overrides"] = {"a": _nested(MAX_NESTING)}
    manifest, problems = parse_manifest(document)
    assert manifest.clock == document["clock"] and manifest.overrides == {}
    assert problems == (f"manifest.overrides is nested more than {MAX_NESTING} levels deep: read as unknown",)
    document["clock"] = {"a": _nested(100_000)}
    document["steps"]["run"] = _nested(100_000)
    document["versions"] = {"torch": _nested(100_000)}
    manifest, problems = parse_manifest(document)
    assert manifest.clock == {} and manifest.steps is None and manifest.versions == {}
    assert problems == (
        f"manifest.steps.run is nested more than {MAX_NESTING} levels deep, not a valid int: read as unknown",
        f"manifest.versions.torch is nested more than {MAX_NESTING} levels deep, not a valid str: entry skipped",
        f"manifest.clock is nested more than {MAX_NESTING} levels deep: read as unknown",
        f"manifest.overrides is nested more than {MAX_NESTING} levels deep: read as unknown",
    )


def test_the_step_clock_keeps_unknown_ready_counts():
    # A step that asked for no batch (the Trainer's loader fetches one ahead) has none: -1, kept, not an error.
    document = _full_manifest()
    steps = len(document["step_clock"]["phase"])
    document["step_clock"]["ready"] = [-1] + [3] * (steps - 1)
    manifest, problems = parse_manifest(document)
    assert problems == () and manifest.step_clock.ready == (-1,) + (3,) * (steps - 1)
    assert manifest.step_clock.columns_agree()
    document["step_clock"]["batches"][0] = -1  # other columns are counts: negative is unknown
    manifest, problems = parse_manifest(document)
    assert any("batches[0]" in p for p in problems)


def test_page_fault_columns_may_be_absent_but_never_ragged():
    document = _fixture_manifest()
    steps = len(document["step_clock"]["phase"])
    manifest, problems = parse_manifest(document)
    assert problems == () and manifest.step_clock.faults == manifest.step_clock.sys_ms == ()  # an older recording
    document["step_clock"]["faults"] = [12_000] + [3_000] * (steps - 1)
    document["step_clock"]["sys_ms"] = [30.0] + [4.5] * (steps - 1)
    manifest, problems = parse_manifest(document)
    assert problems == () and manifest.step_clock.faults[:2] == (12_000, 3_000) and manifest.step_clock.sys_ms[1] == 4.5
    document["step_clock"]["sys_ms"] = [4.5] * (steps - 1)  # one entry short: the columns no longer line up
    manifest, problems = parse_manifest(document)
    assert problems == ("manifest.step_clock columns differ in length: read as unknown",)
    assert manifest.step_clock == StepClock()


def test_a_batch_made_in_the_main_process_keeps_its_worker_minus_one():
    """``BatchFacts.worker`` is -1 for num_workers=0: a signed column, not a negative count read as unknown."""
    columns = ("loader", "epoch", "batch", "made_ns", "rows", "width", "real_tokens", "longest", "nbytes")
    document = {**_fixture_manifest(), "manifest_version": MANIFEST_VERSION}
    document["batches"] = {name: [3] for name in columns} | {"worker": [-1], "fingerprint": ["ab"]}
    manifest, problems = parse_manifest(document)
    assert problems == () and manifest.batches.worker == (-1,) and len(manifest.batches) == 1
    document["batches"]["rows"] = [-3]  # a count is never negative
    manifest, problems = parse_manifest(document)
    assert manifest.batches == BatchFacts() and any("batches.rows[0]" in p for p in problems)
