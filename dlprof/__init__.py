"""dlprof: is my GPU waiting for data, and which DataLoader settings fix it?

`dlprof record` runs training steps under ``torch.profiler`` and also records what happens inside the
DataLoader worker processes (dataset fetch, tokenizer calls, ``collate_fn``) on the same clock.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
