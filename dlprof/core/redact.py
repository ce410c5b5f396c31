"""``--redact``: reports and traces that are safe to post.

A :class:`Redactor` is built from what is sensitive in a run (host names, the user name and home
directory, the command-line arguments, dataset / model / tokenizer paths) and replaces each with a
stable placeholder: the same original always becomes the same placeholder, so a reader can still
follow a report (``[host-1]``, ``[user]``, ``~`` for the home directory, ``[arg-3]``, ``[path-2]``).
Square brackets, not angle brackets: a Markdown renderer (a GitHub issue) drops ``<host-1>`` as an
unknown HTML tag.

Only strings are touched, never numbers; in JSON only string values (not keys), in HTML only the
text and attribute values (not the markup). No torch import: ``dlprof analyze`` uses it.
"""

from __future__ import annotations

import dataclasses
import getpass
import html
import json
import os
import re
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HOST, USER, HOME, ARG, PATH = "host", "user", "home", "arg", "path"
_KINDS = (HOST, USER, HOME, ARG, PATH)

#: A placeholder this module writes (in a trace redacted while recording): never redacted again.
PLACEHOLDER = re.compile(r"\[(?:host|user|arg|path)(?:-\d+)?\]|\bhost-\d+\b")
#: Words of a command line that tell nothing about the user, their data or their machine: dlprof's
#: subcommands, interpreters and launchers, and the common values of device, precision and format options.
#: Replacing them would also hit the same words in a report's own text (``device: cpu``).
KEPT_WORDS = frozenset(
    {
        "record",
        "sweep",
        "analyze",
        "diff",
        "dlprof",
        "python",
        "python3",
        "torchrun",
        "accelerate",
        "launch",
        "deepspeed",
        "swift",
        "sft",
        "pt",
        "rlhf",
        "llamafactory-cli",
        "train",
        "eval",
        "cpu",
        "cuda",
        "mps",
        "auto",
        "true",
        "false",
        "none",
        "null",
        "yes",
        "no",
        "json",
        "text",
        "markdown",
        "html",
        "gloo",
        "nccl",
        "fp16",
        "bf16",
        "fp32",
        "float16",
        "bfloat16",
        "float32",
        "no_cuda",
        "steps",
        "epoch",
        "traces",
        "adamw",
        "adam",
        "sgd",
        "adamw_torch",
        "linear",
        "cosine",
        "fork",
        "spawn",
        "error",
        "ignore",
        "default",
        "debug",
        "info",
        "warning",
    }
)
#: Module prefixes that name software, not the user's project (``python -m torch.distributed.run``).
KEPT_MODULES = ("dlprof.", "torch.", "deepspeed.", "accelerate.", "transformers.", "swift.")
#: Options whose value is a file or directory even when it has no '/' (``--dataset data.json``).
PATH_OPTIONS = frozenset(
    {
        "--dataset",
        "--model",
        "--tokenizer",
        "--out",
        "--output",
        "-o",
        "--data",
        "--config",
        "--output_dir",
        "--output-dir",
        "--model_name_or_path",
        "--dataset_path",
        "--train_file",
        "--logdir",
    }
)
#: Extensions that make a bare word a file name (``train.py``, ``cfg.yaml``).
_FILE_EXTENSION = re.compile(
    r"\.(py|json|jsonl|txt|csv|tsv|parquet|arrow|bin|pt|pth|ckpt|safetensors|yaml|yml|toml|sh|gz|zip|tar|model)$", re.I
)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTERPRETER = re.compile(r"python[0-9.]*")
#: Shorter words are not redacted (but host and user names are): ``--name r`` would turn every lone
#: ``r`` of a report into a placeholder, and two letters identify nobody.
MIN_ARG_CHARS = 3

# Where an original may start and end: never inside a longer word (user ``ann`` in ``annotation``).
# Host and user names may touch '_' (``host_1234.pt.trace.json``, ``pytest-of-alice``); paths and
# arguments may not, and an absolute path never starts inside another path.
_BEFORE = {HOST: r"(?<![A-Za-z0-9])", USER: r"(?<![A-Za-z0-9])", ARG: r"(?<![\w-])", PATH: r"(?<![\w.-])"}
_BEFORE_ABSOLUTE = r"(?<![\w./~-])"
_AFTER = {HOST: r"(?![A-Za-z0-9])", USER: r"(?![A-Za-z0-9])", ARG: r"(?![\w-]|\.[\w-])", PATH: r"(?![\w-]|\.[\w-])"}

#: Every string literal, keys included (group 1 marks a key): scanning them all keeps the scan aligned on literals.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:)?')
_HTML_PARTS = re.compile(r"(<style\b.*?</style>|<[^>]*>)", re.S | re.I)
_HTML_ATTRIBUTE = re.compile(r'="([^"]*)"')


class Redactor:
    """Stable placeholders for a run's sensitive strings; :meth:`redact` replaces them in any text."""

    def __init__(self) -> None:
        self._placeholders: dict[str, str] = {}
        self._kinds: dict[str, str] = {}
        self._counts = dict.fromkeys(_KINDS, 0)
        self._pattern: re.Pattern | None = None
        self._memo: dict[str, str] = {}

    # --- what is sensitive --------------------------------------------------------------------

    def add(self, original: str, kind: str) -> str | None:
        """Make ``original`` (one of ``host``, ``user``, ``home``, ``arg``, ``path``) redacted; returns its placeholder.

        Returns None, and redacts nothing, for what cannot be told apart from ordinary text: empty or
        one-letter strings, the root directory, a placeholder.
        """
        if kind not in _KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        original = original.strip()
        if kind in (HOME, PATH) and len(original) > 1:
            original = original.rstrip("/\\") or original
        if len(original) < 2 or original in ("/", ".", "..", "~") or PLACEHOLDER.fullmatch(original):
            return None
        if original in self._placeholders:
            return self._placeholders[original]
        self._counts[kind] += 1
        n = self._counts[kind]
        if kind == HOME:
            placeholder = "~"
        elif kind == USER:
            placeholder = "[user]" if n == 1 else f"[user-{n}]"
        else:
            placeholder = f"[{kind}-{n}]"
        self._placeholders[original] = placeholder
        self._kinds[original] = PATH if kind == HOME else kind
        escaped = html.escape(original, quote=True)  # as an HTML report spells it
        if escaped != original:
            self._placeholders[escaped] = placeholder
            self._kinds[escaped] = self._kinds[original]
        self._pattern = None
        self._memo.clear()
        return placeholder

    def add_argv(self, argv: Iterable[str], cwd: str | None = None) -> None:
        """Every argument of a command line that is not an option flag, a number or a common word.

        Paths (with a '/', a file extension, or the value of ``--dataset``, ``--model``, ...) become
        ``[path-N]``, in the form given and, with ``cwd``, as absolute paths; other values ``[arg-N]``.
        The training script's directory (the first ``.py``) is a path too: its other modules show in
        Python stack frames.
        """
        previous = ""
        script_seen = False
        for word in argv:
            word = str(word)
            flag = previous
            previous = word
            if word.startswith("-") and not _NUMBER.fullmatch(word):
                if "=" not in word:
                    continue
                flag, word = word.split("=", 1)
            elif "=" in word and re.match(r"[A-Za-z_][\w.-]*=", word):  # key=value (Hydra, the HF callback's command)
                word = word.split("=", 1)[1]
            kind = _classify(word, flag in PATH_OPTIONS)
            if kind is None:
                continue
            self.add(word, kind)
            if kind != PATH:
                continue
            for form in _path_forms(word, cwd):
                self.add(form, PATH)
            if word.endswith(".py") and not script_seen:
                script_seen = True
                parent = os.path.dirname(_absolute(word, cwd) or "")
                if parent.count("/") >= 2 and not _is_software(parent):
                    self.add(parent, PATH)

    def add_local(self) -> None:
        """This machine's host name and the user running dlprof: their name and home directory."""
        host = socket.gethostname()
        self.add(host, HOST)
        self.add(host.split(".")[0], HOST)
        users = [os.environ.get("USER"), os.environ.get("LOGNAME")]
        try:
            users.insert(0, getpass.getuser())
        except (KeyError, OSError, ImportError):  # no passwd entry (a container started with a numeric uid)
            pass
        home: str | None
        try:
            home = str(Path.home())
        except (KeyError, RuntimeError, OSError):
            home = os.environ.get("HOME")
        if home:
            self.add(home, HOME)
        for user in users:
            if user:
                self.add(user, USER)

    def add_manifest(self, manifest: Mapping[str, Any], cwd: str | None = None) -> None:
        """What a manifest (``Manifest.to_dict()`` or the dict written in a trace) holds about the machine and
        command."""
        host = (manifest.get("host") or {}).get("hostname")
        if isinstance(host, str):
            self.add(host, HOST)
            self.add(host.split(".")[0], HOST)
        for key in ("command", "script", "process_argv"):
            argv = manifest.get(key) or ()
            if isinstance(argv, (list, tuple)):
                self.add_argv([w for w in argv if isinstance(w, str)], cwd)

    def add_trace_name(self, name: str) -> None:
        """The host of a trace file named ``<host>_<pid>.<ms>.pt.trace.json[.gz]`` (torch.profiler's and dlprof's
        names)."""
        found = re.match(r"(.+?)_\d+\.\d+\.pt\.trace\.json", os.path.basename(name))
        if found:
            self.add(found.group(1), HOST)

    def host_label(self, hostname: str) -> str:
        """The placeholder of a host name without brackets (``host-1``), for a file name."""
        placeholder = self.add(hostname, HOST) or self._placeholders.get(hostname.strip(), hostname)
        return placeholder.strip("[]")

    @property
    def placeholders(self) -> dict[str, str]:
        """Each original and its placeholder."""
        return dict(self._placeholders)

    # --- replacing ----------------------------------------------------------------------------

    def _compiled(self) -> re.Pattern | None:
        if self._pattern is None and self._placeholders:
            # Longest first: a home directory inside a path argument is part of that argument's placeholder.
            alternatives = []
            for original in sorted(self._placeholders, key=len, reverse=True):
                kind = self._kinds[original]
                before = _BEFORE_ABSOLUTE if kind == PATH and original.startswith("/") else _BEFORE[kind]
                alternatives.append(f"{before}{re.escape(original)}{_AFTER[kind]}")
            self._pattern = re.compile("|".join(alternatives))
        return self._pattern

    def redact(self, text: str) -> str:
        """``text`` with every sensitive string replaced by its placeholder."""
        pattern = self._compiled()
        if pattern is None or not text:
            return text
        done = self._memo.get(text)
        if done is None:
            done = pattern.sub(lambda m: self._placeholders[m.group(0)], text)
            if len(text) < 1000:  # event names and args repeat in a trace; long texts do not
                self._memo[text] = done
        return done

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string in it redacted; keys and numbers kept.

        Dicts and lists are changed in place (a trace is large); a tuple inside them (``Manifest.to_dict()``
        keeps tuples) becomes a list. A tuple or string given as ``value`` is returned redacted.
        """
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, tuple):
            return self.redact_value(list(value))
        stack = [value]
        while stack:
            item = stack.pop()
            entries = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
            for key, v in entries:
                if isinstance(v, str):
                    item[key] = self.redact(v)
                elif isinstance(v, tuple):
                    item[key] = v = list(v)
                    stack.append(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        return value

    def redact_fields(self, value: Any) -> Any:
        """A copy of a frozen dataclass (a :class:`~dlprof.core.manifest.Manifest`) with every string in it redacted, as
        :meth:`redact_value` redacts its ``to_dict()``: keys, numbers and types kept."""
        if isinstance(value, str):
            return self.redact(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            return dataclasses.replace(value, **{f.name: self.redact_fields(getattr(value, f.name)) for f in fields})
        if isinstance(value, (tuple, list)):
            return type(value)(self.redact_fields(v) for v in value)
        if isinstance(value, dict):
            return {key: self.redact_fields(v) for key, v in value.items()}
        return value

    def redact_json(self, text: str) -> str:
        """JSON text with its string values redacted, its layout, keys and numbers kept: it still parses."""

        def value(match: re.Match) -> str:
            literal = match.group(0)
            if match.group(1):  # a key
                return literal
            original = json.loads(literal)
            redacted = self.redact(original)
            return literal if redacted == original else json.dumps(redacted, ensure_ascii=False)

        return _JSON_STRING.sub(value, text)

    def redact_html(self, text: str) -> str:
        """HTML with its text and attribute values redacted; tags, attribute names and the style sheet kept."""
        parts = _HTML_PARTS.split(text)
        for i, part in enumerate(parts):
            if i % 2 == 0:
                parts[i] = self.redact(part)
            elif part[:6].lower() != "<style":
                parts[i] = _HTML_ATTRIBUTE.sub(lambda m: '="' + self.redact(m.group(1)) + '"', part)
        return "".join(parts)

    def redact_rendered(self, text: str, fmt: str) -> str:
        """A rendered report (``text``, ``markdown``, ``json`` or ``html``), redacted."""
        if fmt == "json":
            return self.redact_json(text)
        if fmt == "html":
            return self.redact_html(text)
        return self.redact(text)


def _classify(word: str, path_option: bool) -> str | None:
    """``path``, ``arg``, or None for a word that is not redacted."""
    if not word or PLACEHOLDER.search(word) or _NUMBER.fullmatch(word):
        return None
    if path_option or "/" in word or "\\" in word or word.startswith("~") or _FILE_EXTENSION.search(word):
        return PATH if len(word) >= MIN_ARG_CHARS or "/" in word else None
    lower = word.lower()
    if (
        len(word) < MIN_ARG_CHARS
        or lower in KEPT_WORDS
        or _INTERPRETER.fullmatch(lower)
        or lower.startswith(KEPT_MODULES)
    ):
        return None
    return ARG


def _absolute(path: str, cwd: str | None) -> str | None:
    if path.startswith("~"):
        return os.path.expanduser(path)
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(cwd, path)) if cwd else None


def _path_forms(path: str, cwd: str | None) -> list[str]:
    """Other spellings of a path argument: absolute (from ``cwd``), ``~`` expanded, symlinks resolved."""
    forms = []
    absolute = _absolute(path, cwd)
    if absolute:
        forms.append(absolute)
        try:
            forms.append(os.path.realpath(absolute))
        except OSError:
            pass
    return [f for f in forms if f != path]


def _is_software(directory: str) -> bool:
    """An installed interpreter's or package's directory (``/usr/lib/python3.11/site-packages/x``): not the user's."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return (
        "site-packages" in directory
        or "dist-packages" in directory
        or any(p and (directory == p or directory.startswith(p.rstrip("/") + "/")) for p in prefixes)
    )


def for_run(
    manifests: Iterable[Mapping[str, Any]] = (),
    trace_names: Iterable[str] = (),
    paths: Iterable[str] = (),
    cwd: str | None = None,
    local: bool = True,
) -> Redactor:
    """The Redactor of one run (or of every run one report covers).

    Args:
        manifests: the runs' manifests, as dicts (``Manifest.to_dict()``, or the ``dlprof`` object of a trace).
        trace_names: trace file names, for the host in ``<host>_<pid>.<ms>.pt.trace.json.gz``.
        paths: more paths to hide (an absolute input path given to ``dlprof analyze``).
        cwd: the directory the command ran in, to match relative path arguments in their absolute form.
        local: also this machine's host name, user name and home directory.
    """
    redactor = Redactor()
    if local:
        redactor.add_local()
    for manifest in manifests:
        redactor.add_manifest(manifest, cwd)
    for name in trace_names:
        redactor.add_trace_name(name)
    for path in paths:
        redactor.add(path, PATH)
    if cwd and cwd.count("/") >= 2 and not _is_software(cwd):
        redactor.add(cwd, PATH)
    return redactor


def for_command(cli_argv: Iterable[str], command: Iterable[str]) -> Redactor:
    """The Redactor of what ``dlprof record`` or ``dlprof sweep`` was asked to run, in this directory, on this
    machine."""
    return for_run([{"command": list(cli_argv), "script": list(command)}], cwd=os.getcwd())
