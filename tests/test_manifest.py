"""The manifest: one typed, versioned dataclass, parsed once where a trace is read."""

from __future__ import annotations

import json

from conftest import DATA_DIR

from dlprof import schema
from dlprof.manifest import MANIFEST_VERSION, Manifest, StepClock, parse_manifest


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
