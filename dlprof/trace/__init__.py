"""Reading and validating traces (dlprof's and any PyTorch profiler's). No torch import."""
