"""Pure functions of a TraceRun: step breakdown, loader statistics, GPU activity. No torch import."""
