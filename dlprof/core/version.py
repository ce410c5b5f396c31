"""dlprof's version, in a module of its own: the recorder, ``setup.cfg`` and the package read it without importing
anything else of dlprof."""

__version__ = "0.3.0"
