"""dlprof's version and the versions of the formats it writes, in a module of its own: the recorder, ``setup.cfg``, the
manifest and the result types read them without importing anything else of dlprof.

Every change of a format below moves ``__version__`` and gets an entry in CHANGELOG.md, so that a version names one
set of formats (tests/test_version.py checks both).
"""

__version__ = "0.9.0"

#: The manifest each trace carries (dlprof.core.manifest describes each version's fields).
MANIFEST_VERSION = 8
#: The JSON documents of ``dlprof analyze``, ``dlprof sweep`` and ``dlprof diff``: ``"<name>/<version>"``.
REPORT_SCHEMA = "dlprof.report/1"
SWEEP_SCHEMA = "dlprof.sweep/1"
DIFF_SCHEMA = "dlprof.diff/1"
#: Beside a trace, the steps a plain launch of its command timed (``dlprof record --plain-launch``).
PLAIN_LAUNCH_SCHEMA = "dlprof.plain_launch/1"

#: Every format this version writes, by name.
FORMATS: dict[str, int | str] = {
    "manifest": MANIFEST_VERSION,
    "report": REPORT_SCHEMA,
    "sweep": SWEEP_SCHEMA,
    "diff": DIFF_SCHEMA,
    "plain_launch": PLAIN_LAUNCH_SCHEMA,
}
