"""The ranks summed up (``RankComparison.summary``), on a hand-made set of ten ranks whose numbers are worked out here.

rank  host  step  data wait  collectives  own work    per step (5, 6)
0     a     10.0  1.0        5.0          5.0         10.0, 10.5
1     a     10.0  1.25       4.8          5.2         10.0, 10.5
2     a     10.0  6.0        0.5          9.5         starved of data: the slowest
3     a     10.0  1.1        4.9          5.1
4     b     10.2  0.9        2.2          8.0         slow compute
5     b     10.2  1.0        5.2          5.0
6     b     10.2  1.3        4.6          5.6
7     b     10.2  1.0        5.0          5.2
8     c     10.4  2.0        3.4          7.0
9     c     10.4  1.0        5.3          5.1         step 6 not recorded
"""

from __future__ import annotations

import pytest
from many_ranks import replicate_tiny, uniform_job

from dlprof.analysis.ranks import SLOWEST_RANKS, compare_ranks, summarize_ranks
from dlprof.results.analysis import RankStats
from dlprof.workflows.analyze import build_report

#: rank -> (host, step, data wait, collectives, own work)
ROWS = {
    0: ("a", 10.0, 1.0, 5.0, 5.0),
    1: ("a", 10.0, 1.25, 4.8, 5.2),
    2: ("a", 10.0, 6.0, 0.5, 9.5),
    3: ("a", 10.0, 1.1, 4.9, 5.1),
    4: ("b", 10.2, 0.9, 2.2, 8.0),
    5: ("b", 10.2, 1.0, 5.2, 5.0),
    6: ("b", 10.2, 1.3, 4.6, 5.6),
    7: ("b", 10.2, 1.0, 5.0, 5.2),
    8: ("c", 10.4, 2.0, 3.4, 7.0),
    9: ("c", 10.4, 1.0, 5.3, 5.1),
}


def _row(rank: int) -> RankStats:
    host, step, wait, collective, own = ROWS[rank]
    per_step = ((5, step),) if rank == 9 else ((5, step), (6, step + 0.5))
    return RankStats(
        rank=rank,
        trace_file=f"r{rank}",
        steps=2,
        step_ms=step,
        data_wait_ms=wait,
        data_wait_pct=100 * wait / step,
        collective_ms=collective,
        own_ms=own,
        loader_batch_ms=None,
        worker_pss_mib=None,
        num_workers=0,
        unprofiled_step_ms=None,
        collective_kinds=(),
        host=host,
        per_step_ms=per_step,
    )


@pytest.fixture(scope="module")
def summary():
    return summarize_ranks([_row(r) for r in reversed(range(10))])  # in any order


def test_the_spread_over_the_ranks(summary):
    # Sorted steps: four 10.0, four 10.2, two 10.4; p50 at position 4.5, p90 at 8.1 (linear, as numpy).
    assert (summary.step.p50_ms, summary.step.p90_ms, summary.step.max_ms) == pytest.approx((10.2, 10.4, 10.4))
    assert summary.step.max_rank == 8  # the lower of two ranks with the max
    # Sorted waits: 0.9 1.0 1.0 1.0 1.0 1.1 1.25 1.3 2.0 6.0: p50 (1.0 + 1.1) / 2, p90 2.0 + 0.1 * (6.0 - 2.0).
    assert (summary.data_wait.p50_ms, summary.data_wait.p90_ms, summary.data_wait.max_ms) == pytest.approx(
        (1.05, 2.4, 6.0)
    )
    assert summary.data_wait.max_rank == 2
    # Sorted collectives: 0.5 2.2 3.4 4.6 4.8 4.9 5.0 5.0 5.2 5.3.
    assert (summary.collectives.p50_ms, summary.collectives.p90_ms, summary.collectives.max_ms) == pytest.approx(
        (4.85, 5.21, 5.3)
    )
    assert summary.collectives.max_rank == 9


def test_the_slowest_ranks_and_why(summary):
    assert SLOWEST_RANKS == 5
    # Most own work first; ranks 1 and 7 tie at 5.2: the lower rank.
    assert [s.stats.rank for s in summary.slowest] == [2, 4, 8, 6, 1]
    got = {s.stats.rank: s for s in summary.slowest}
    # Rank 2: 6.0 - 1.0 (the others' median wait) = 5.0 beyond, of 9.5 - 5.2 = 4.3 own work beyond: data.
    assert (got[2].reason, got[2].extra_data_wait_ms, got[2].extra_own_ms) == ("data", pytest.approx(5.0), 4.3)
    # Rank 4: waits less than the others' median (1.1): its 2.8 ms of extra own work is compute.
    assert (got[4].reason, got[4].extra_data_wait_ms) == ("compute", 0.0) and got[4].extra_own_ms == pytest.approx(2.8)
    # Rank 8: 1.0 beyond of 1.8: at least half, data. Rank 6: 0.3 of 0.4, data. Rank 1: no own work beyond: compute.
    assert (got[8].reason, got[6].reason, got[1].reason) == ("data", "data", "compute")
    assert got[8].extra_data_wait_ms == pytest.approx(1.0) and got[8].extra_own_ms == pytest.approx(1.8)


def test_who_waited_for_each_slow_rank(summary):
    got = {s.stats.rank: s for s in summary.slowest}
    # Everyone waited for rank 2: each one's collectives beyond its 0.5 ms.
    assert got[2].waited_by == (0, 1, 3, 4, 5, 6, 7, 8, 9)
    assert got[2].waited_ms_mean == pytest.approx(35.9 / 9) and got[2].waited_ms_max == pytest.approx(4.8)
    # For rank 4 (own 8.0, collectives 2.2): every rank with less own work, not rank 2.
    assert got[4].waited_by == (0, 1, 3, 5, 6, 7, 8, 9)
    assert got[4].waited_ms_mean == pytest.approx(20.6 / 8) and got[4].waited_ms_max == pytest.approx(3.1)
    assert got[8].waited_by == (0, 1, 3, 5, 6, 7, 9) and got[8].waited_ms_mean == pytest.approx(11.0 / 7)
    assert got[6].waited_by == (0, 1, 3, 5, 7, 9) and got[6].waited_ms_max == pytest.approx(0.7)
    # Rank 7 ties rank 1's own work (5.2): it did not wait for it.
    assert got[1].waited_by == (0, 3, 5, 9) and got[1].waited_ms_mean == pytest.approx(0.3)


def test_the_slowest_rank_agrees_with_the_comparison():
    comparison = compare_ranks([_row(r) for r in range(10)])
    first = comparison.summary.slowest[0]
    assert (first.stats.rank, first.reason) == (comparison.slowest_rank, comparison.slowest_reason) == (2, "data")
    assert first.extra_data_wait_ms == pytest.approx(comparison.extra_data_wait_ms)
    # The others' collectives beyond rank 2's 0.5 ms: RankComparison.waited_ms, one definition.
    assert comparison.waited_ms == {r: pytest.approx(ROWS[r][3] - 0.5) for r in range(10) if r != 2}
    assert first.waited_by == tuple(r for r, v in sorted(comparison.waited_ms.items()) if v > 0)


def test_ranks_grouped_by_node(summary):
    nodes = [(n.host, n.ranks, n.step_ms_p50, n.slowest_rank, n.slowest_own_ms) for n in summary.nodes]
    # The slowest node first (by its slowest rank's own work).
    assert nodes == [
        ("a", (0, 1, 2, 3), 10.0, 2, 9.5),
        ("b", (4, 5, 6, 7), 10.2, 4, 8.0),
        ("c", (8, 9), 10.4, 8, 7.0),
    ]


def test_the_histogram_of_data_wait(summary):
    bins = summary.data_wait_histogram
    assert len(bins) == 10  # one per rank, up to DATA_WAIT_BINS
    assert [round(b.lo_ms, 6) for b in bins] == [round(0.6 * i, 6) for i in range(10)]
    assert bins[-1].hi_ms == pytest.approx(6.0)  # the largest wait, included in the last bin
    assert [b.ranks for b in bins] == [(), (0, 3, 4, 5, 7, 9), (1, 6), (8,), (), (), (), (), (), (2,)]


def test_the_heat_map_of_step_time(summary):
    heat = summary.heat_map
    assert heat.ranks == tuple(range(10)) and heat.steps == (5, 6)
    assert heat.step_ms[0] == (10.0, 10.5) and heat.step_ms[9] == (10.4, None)  # rank 9 did not record step 6
    assert (heat.lo_ms, heat.hi_ms) == pytest.approx((10.0, 10.9))


def test_no_data_wait_is_one_bin_and_unknown_hosts_are_one_node():
    rows = [
        RankStats(
            rank=r,
            trace_file=f"r{r}",
            steps=1,
            step_ms=5.0,
            data_wait_ms=0.0,
            data_wait_pct=0.0,
            collective_ms=1.0,
            own_ms=4.0,
            loader_batch_ms=None,
            worker_pss_mib=None,
            num_workers=0,
            unprofiled_step_ms=None,
        )
        for r in range(3)
    ]
    summary = summarize_ranks(rows)
    assert [(b.lo_ms, b.hi_ms, b.ranks) for b in summary.data_wait_histogram] == [(0.0, 0.0, (0, 1, 2))]
    assert [(n.host, n.ranks) for n in summary.nodes] == [(None, (0, 1, 2))]
    assert summary.heat_map.steps == () and summary.heat_map.step_ms == ((), (), ())


def test_hosts_come_from_the_manifest_else_the_trace_name(tmp_path):
    # replicate_tiny names its files rank<R>_<pid>...: the manifest's hostname (host<k>) wins.
    (job,) = build_report(replicate_tiny(tmp_path / "tiny", 4, 2)).runs
    assert [r.host for r in job.ranks.ranks] == ["host0", "host0", "host1", "host1"]
    # Without a manifest: the host in torch.profiler's file name <host>_<pid>.<ms>.pt.trace.json.
    (job,) = build_report(uniform_job(tmp_path / "job", 3, 2)).runs
    assert [r.host for r in job.ranks.ranks] == ["node0", "node0", "node1"]
    assert [n.host for n in job.ranks.summary.nodes] == ["node1", "node0"]  # rank 2's own work is the most
    # Steps of max(data + compute) + 200 µs: 120 + 420 + 200, then 132 + 462 + 200.
    assert job.ranks.ranks[0].per_step_ms == ((5, pytest.approx(0.74)), (6, pytest.approx(0.794)))
