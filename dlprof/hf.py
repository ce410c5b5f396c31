"""Hugging Face ``Trainer`` integration: ``from dlprof.hf import DlprofCallback``.

For notebooks and code that ``dlprof record`` cannot wrap; see :class:`dlprof.capture.hf.DlprofCallback`.
Importing this module imports ``transformers``.
"""

from __future__ import annotations

from dlprof.capture.hf import DlprofCallback

__all__ = ["DlprofCallback"]
