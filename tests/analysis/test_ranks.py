"""Several ranks of one job, on the hand-written traces in tests/data/ranks (expected µs worked out below).

Both ranks: two 1000 µs steps. In each step, rank 0 waits 100 µs for data, launches its all-reduce
(``c10d::allreduce_``, 10 µs) at 290 and gloo runs it on another thread from 300 to 900: it waits there
for rank 1. Rank 1 waits 700 µs for data and its all-reduce runs from 740 to 900. Rank 1's clock
(baseTimeNanoseconds) is 100 µs later than rank 0's.
"""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import DATA_DIR

from dlprof.analysis.ranks import MAX_WORLD_SIZE, compare_ranks, missing_ranks
from dlprof.capture.merge import dumps_trace
from dlprof.report import renderer
from dlprof.results.analysis import RankStats
from dlprof.results.report import Report
from dlprof.workflows.analyze import build_report

RANKS = DATA_DIR / "ranks"


@pytest.fixture(scope="module")
def job():
    (run,) = build_report(RANKS).runs
    return run


def test_each_rank_is_split_into_collectives_and_own_work(job):
    rows = {r.rank: r for r in job.ranks.ranks}
    assert rows[0].data_wait_ms == pytest.approx(0.1) and rows[1].data_wait_ms == pytest.approx(0.7)
    assert rows[0].collective_ms == pytest.approx(0.61)  # 290-900: the launch, then gloo's thread
    assert rows[1].collective_ms == pytest.approx(0.16)  # 740-900
    assert rows[0].own_ms == pytest.approx(0.39) and rows[1].own_ms == pytest.approx(0.84)
    assert job.ranks.collectives == ["all_reduce"]


def test_the_data_starved_rank_is_named_and_the_others_wait_for_it(job):
    assert job.ranks.slowest_rank == 1 and job.ranks.slowest_reason == "data"
    assert job.ranks.extra_data_wait_ms == pytest.approx(0.6)
    assert job.ranks.waited_ms == {0: pytest.approx(0.45)}
    # The report is the slowest rank's: it sets the pace.
    assert job.info.trace_file.endswith("rank1.json")


def test_ranks_are_lanes_on_one_clock(job):
    lanes = {lane.label: lane for lane in job.timeline.lanes}
    assert list(lanes)[:2] == ["rank 1 main thread", "rank 0 main thread"]
    # Rank 0's second data wait (1000-1100 on its clock) is 1000 - 100 µs after rank 1's first step began.
    waits = [(s, e) for kind, s, e in lanes["rank 0 main thread"].bars if kind == "data_wait"]
    assert waits[0] == pytest.approx((0.9, 1.0))


def test_every_format_shows_the_ranks(job):
    line = (
        "rank 1 waited 0.70 ms per step for data (0.60 ms more than the other ranks); rank 0 waited 0.45 ms per step"
        " for rank 1 in all_reduce"
    )
    report = build_report(RANKS)
    for fmt in ("text", "markdown", "html"):
        assert line in renderer(Report, fmt)(report), fmt
    document = json.loads(renderer(Report, "json")(report))
    assert document["ranks"]["slowest_rank"] == 1 and document["ranks"]["slowest_reason"] == "data"
    assert [r["waited_for_slowest_ms"] for r in document["ranks"]["ranks"]] == [0.45, None]


def test_compute_is_named_when_data_does_not_explain_the_slowest_rank():
    def row(rank: int, wait: float, collective: float) -> RankStats:
        return RankStats(
            rank=rank,
            trace_file=f"r{rank}",
            steps=10,
            step_ms=10.0,
            data_wait_ms=wait,
            data_wait_pct=10 * wait,
            collective_ms=collective,
            own_ms=10.0 - collective,
            loader_batch_ms=None,
            worker_pss_mib=None,
            num_workers=0,
            unprofiled_step_ms=None,
        )

    comparison = compare_ranks([row(0, 1.0, 4.0), row(1, 1.2, 0.5), row(2, 0.9, 4.5)])
    assert comparison.slowest_rank == 1 and comparison.slowest_reason == "compute"
    assert comparison.waited_ms == {0: pytest.approx(3.5), 2: pytest.approx(4.0)}


def test_the_rank_is_on_the_first_line_as_hta_reads_it(tmp_path):
    """HTA's regex is ``"rank":\\s+(\\d+)``: compact JSON would make every file rank 0."""
    trace_file = pytest.importorskip("hta.common.trace_file")  # HTA comes with the hta extra

    paths = []
    for rank in (0, 1):
        document = {
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
            "dlprof": {"rank": rank},
            "traceEvents": [],
        }
        path = tmp_path / f"r{rank}.json.gz"
        path.write_bytes(gzip.compress(dumps_trace(document)))
        assert json.loads(gzip.decompress(path.read_bytes())) == document
        paths.append(str(path))
    ok, ranks = trace_file.create_rank_to_trace_dict(paths)
    assert ok and ranks == {0: paths[0], 1: paths[1]}


def test_missing_ranks_come_from_the_ranks_present_and_the_world_size():
    assert missing_ranks([0, 3, 1], [4, 4, None]) == (2,)  # a trace whose manifest does not say
    assert missing_ranks([None], [3]) == (1, 2)  # a rank of None is rank 0
    assert missing_ranks([0, 1], [None, None]) == ()  # world size unknown: none is called missing
    assert missing_ranks([0], [2, 4]) == (1, 2, 3)  # the largest said
    assert missing_ranks([0], [MAX_WORLD_SIZE + 1]) == ()  # a malformed manifest, not a job
