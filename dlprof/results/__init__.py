"""Every stage's result type, in the bottom layer: workflows and stages build them, renderers read them.

One module per stage, each importing only the standard library and dlprof's other bottom-layer modules
(:mod:`dlprof.core.errors`, :mod:`dlprof.core.schema`, :mod:`dlprof.core.manifest`): so a renderer that imports a result
pulls in no workflow, no recorder and no torch. See docs/ARCHITECTURE.md.
"""
