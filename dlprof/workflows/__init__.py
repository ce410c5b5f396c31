"""Workflows that compose the stages: analyze (trace -> analysis -> advice -> Report), record's request, sweep
and diff.

The CLI, scripts and tests call these; report/ only renders what they return.
"""
