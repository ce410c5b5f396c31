"""dlprof inside training frameworks: code that drives a recording (session, finalizing, merge) from a framework's own
hooks, for training that ``dlprof record`` cannot wrap.

:mod:`dlprof.integrations.transformers`: Hugging Face ``Trainer`` (``from dlprof.hf import DlprofCallback``).
"""
