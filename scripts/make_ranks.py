"""Make a run of N ranks from one rank's real trace: N copies, each a distinct rank of one job.

    python scripts/make_ranks.py TRACE OUT_DIR --ranks 16

TRACE is a trace file (``.json`` or ``.json.gz``) or a run directory holding one (e.g. one recorded with
``python -m dlprof record --out /tmp/x --name base``). Each copy gets its own ``distributedInfo`` (rank k,
world size N, spelled on the first line as HTA reads it), its manifest's rank (and world size, where it has one),
and a clock base ``k x 137 µs`` later, so that lining the ranks up on one clock shifts each a little, as
ranks of a real job are. Written gzip-compressed as ``rank<k>.pt.trace.json.gz``.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_trace import _load

from dlprof.capture import merge
from dlprof.core import schema

#: Each rank's clock base is this much later than the previous rank's (µs).
BASE_SHIFT_US = 137


def make_ranks(trace: Path, out_dir: Path, ranks: int) -> list[Path]:
    """Write ``ranks`` copies of ``trace`` into ``out_dir`` as the ranks of one run; their paths."""
    document = _load(trace)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = document.get("distributedInfo") if isinstance(document.get("distributedInfo"), dict) else {}
    manifest = document.get(schema.MANIFEST_KEY)
    base_ns = document.get("baseTimeNanoseconds")
    written = []
    for k in range(ranks):
        copy = dict(document)
        copy["distributedInfo"] = {**info, "rank": k, "world_size": ranks}
        if isinstance(manifest, dict):
            copy[schema.MANIFEST_KEY] = {
                **manifest,
                **{key: value for key, value in (("rank", k), ("world_size", ranks)) if key in manifest},
            }
        if isinstance(base_ns, int):
            copy["baseTimeNanoseconds"] = base_ns + k * BASE_SHIFT_US * 1000
        path = out_dir / f"rank{k:04d}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(merge.dumps_trace(copy), compresslevel=1))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ranks", type=int, default=16)
    args = parser.parse_args()
    for path in make_ranks(args.trace, args.out_dir, args.ranks):
        print(path)


if __name__ == "__main__":
    main()
