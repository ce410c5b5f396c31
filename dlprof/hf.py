"""Hugging Face ``Trainer`` integration: ``from dlprof.hf import DlprofCallback``.

For notebooks and code that ``dlprof record`` cannot wrap; see
:class:`dlprof.integrations.transformers.DlprofCallback`. Importing this module imports ``transformers``.
"""

from __future__ import annotations

from dlprof.integrations.transformers import DlprofCallback

__all__ = ["DlprofCallback"]
