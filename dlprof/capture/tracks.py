"""The tracks of a merged trace as Perfetto draws them: complete events nest on every thread, and every track is named.

Perfetto's JSON importer puts the complete (``ph: X``) events of one ``(pid, tid)`` on one track and moves an event
that starts inside another and ends after it to an overflow track, with an import warning. :func:`untangle` moves such
events onto tracks of their own first, but only those the analysis reads from any thread of their process (dlprof's
spans, the DataLoader's ``__next__`` calls, the optimizer's annotations), so that no number of ``dlprof analyze``
changes; :func:`name_tracks` names every process and thread that has events.
"""

from __future__ import annotations

from collections import defaultdict

from dlprof.core import schema
from dlprof.trace import events as ev

#: Thread ids of the tracks :func:`untangle` makes, counted up per process: above Linux's largest pid (2**22) and
#: below dlprof's main-process loader track (``schema.MAIN_LOADER_TID_OFFSET + pid``), so they collide with neither.
OVERLAP_TID_BASE = 1 << 29
#: Appended to the name of the thread whose overlapping events a track takes.
OVERLAP_SUFFIX = " (overlapping)"
#: Event phases that draw on a thread's track; counters (``C``) draw on their process's.
THREAD_PHASES = frozenset({"X", "B", "E", "i", "I"})
#: Metadata and flows make no track of their own.
NO_TRACK_PHASES = frozenset({"M", "s", "t", "f"})

Slice = tuple[int, int, int]  # start ns, minus end ns, index in the event list: sorts by start, the longer first


#: Names that may be movable (a quick test that most of Kineto's millions of ops fail).
_MOVABLE_PREFIXES = (schema.DATALOADER_NEXT_PREFIX, *ev.OPTIMIZER_PREFIXES)


def movable(event: dict) -> bool:
    """Whether the analysis reads ``event`` from any thread of its process, so that another track changes no number:
    dlprof's spans, the DataLoader's ``__next__`` and ``Optimizer.step#``/``zero_grad#`` (which the step breakdown
    claims for the optimizer before it looks at the training thread's other ops). Kineto's ProfilerSteps and ops
    stay where Kineto put them."""
    name = event.get("name")
    if event.get("cat") == schema.CATEGORY:
        return isinstance(name, str)
    return (
        isinstance(name, str)
        and name.startswith(_MOVABLE_PREFIXES)
        and (ev.is_dataloader_next(name) or ev.is_optimizer(name))
    )


def _slice(event: dict, index: int) -> Slice | None:
    """The event's extent in whole ns (Kineto writes µs with 3 decimals), or None if it has no usable times."""
    try:
        start = round(event["ts"] * 1000)
        end = start + round(event.get("dur", 0) * 1000)
    except (KeyError, TypeError):
        return None
    return (start, -end, index) if end >= start else None


def _overlapping(events: list[dict], slices: list[Slice]) -> list[Slice]:
    """The movable slices of one track that must leave it for the others to nest.

    A slice that would partly overlap the innermost open one leaves if it is movable, else the open one does if it is;
    two of Kineto's own that overlap stay as Kineto wrote them.
    """
    leaving: list[Slice] = []
    open_slices: list[Slice] = []  # the slices containing the current start, outermost first
    for piece in sorted(slices):
        start, end = piece[0], -piece[1]
        while open_slices and -open_slices[-1][1] <= start:
            open_slices.pop()
        while open_slices and end > -open_slices[-1][1]:
            if movable(events[piece[2]]):
                leaving.append(piece)
                break
            if not movable(events[open_slices[-1][2]]):
                break
            leaving.append(open_slices.pop())
        else:
            open_slices.append(piece)
    return leaving


def _lanes(pieces: list[Slice]) -> list[list[Slice]]:
    """``pieces`` on as few tracks as nest them: each goes on the first track where it nests."""
    lanes: list[list[Slice]] = []
    open_by_lane: list[list[int]] = []  # ends of each lane's open slices
    for piece in sorted(pieces):
        start, end = piece[0], -piece[1]
        for lane, ends in zip(lanes, open_by_lane, strict=True):
            while ends and ends[-1] <= start:
                ends.pop()
            if not ends or end <= ends[-1]:
                lane.append(piece)
                ends.append(end)
                break
        else:
            lanes.append([piece])
            open_by_lane.append([end])
    return lanes


def _thread_names(events: list[dict]) -> dict[tuple, str]:
    return {
        (e.get("pid"), e.get("tid")): str(e.get("args", {}).get("name"))
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict)
    }


def untangle(events: list[dict]) -> list[dict]:
    """Moves every movable complete event that would partly overlap another of its ``(pid, tid)`` onto a track of its
    own in the same process (as few as nest them, named after their thread), changing ``events`` in place.

    Returns:
        The ``thread_name`` events of the new tracks, for the caller to add.
    """
    complete = [(index, e) for index, e in enumerate(events) if e.get("ph") == "X"]
    with_movable = {(e.get("pid"), e.get("tid")) for _, e in complete if movable(e)}
    tracks: dict[tuple, list[Slice]] = defaultdict(list)
    for index, event in complete:
        key = (event.get("pid"), event.get("tid"))
        if key in with_movable and (piece := _slice(event, index)) is not None:
            tracks[key].append(piece)
    names = _thread_names(events)
    next_tid: dict[object, int] = defaultdict(int)
    metadata = []
    for (pid, tid), slices in tracks.items():
        for number, lane in enumerate(_lanes(_overlapping(events, slices)), start=1):
            new_tid = OVERLAP_TID_BASE + next_tid[pid]
            next_tid[pid] += 1
            for piece in lane:
                events[piece[2]]["tid"] = new_tid
            name = names.get((pid, tid), f"thread {tid}") + OVERLAP_SUFFIX + (f" {number}" if number > 1 else "")
            metadata.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": new_tid, "args": {"name": name}})
    return metadata


def name_tracks(events: list[dict], process_names: dict[int, str]) -> list[dict]:
    """``process_name``/``thread_name`` events for the processes and threads of ``events`` that have none: the name
    in ``process_names``, else ``process P``/``thread T``. Ids that are strings (Kineto's ``Spans`` process) are
    their own names in Perfetto and are left alone; so are global instant events, which draw on no track."""
    named_processes, named_threads = set(), set()
    processes, threads = set(), set()
    for e in events:
        ph, pid, tid = e.get("ph"), e.get("pid"), e.get("tid")
        if ph == "M":
            if e.get("name") == "process_name":
                named_processes.add(pid)
            elif e.get("name") == "thread_name":
                named_threads.add((pid, tid))
        elif ph not in NO_TRACK_PHASES and not (ph in ("i", "I") and e.get("s") == "g"):
            processes.add(pid)
            if ph in THREAD_PHASES:
                threads.add((pid, tid))
    metadata = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": pid,
            "tid": 0,
            "args": {"name": process_names.get(pid, f"process {pid}")},
        }
        for pid in sorted(p for p in processes - named_processes if isinstance(p, int))
    ]
    metadata += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}}
        for pid, tid in sorted((p, t) for p, t in threads - named_threads if isinstance(p, int) and isinstance(t, int))
    ]
    return metadata
