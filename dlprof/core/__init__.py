"""The bottom floor: what every stage shares (errors, schema names, the manifest and its parser, how speeds are
measured, redaction, the version). Imports nothing of dlprof above it."""
