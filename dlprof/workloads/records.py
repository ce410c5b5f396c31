"""Instruction/response records from a JSON or JSON-lines file, in the formats fine-tuning users have.

Pure Python (no torch), so ``dlprof record`` checks a dataset before it starts anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dlprof.core.errors import InputError

_PROMPT_KEYS = ("instruction", "query", "prompt", "question")
_RESPONSE_KEYS = ("output", "response", "completion", "answer")
_CHAT_KEYS = ("messages", "conversations")
_ASSISTANT_ROLES = ("assistant", "gpt", "model")
_FORMATS_HINT = (
    "each record needs 'instruction' and 'output' (optionally 'input', 'system'), or 'query'/'prompt' and "
    "'response'/'completion', or a 'messages' list ending with an assistant turn"
)


@dataclass(frozen=True)
class Example:
    """One training example: the prompt (loss-masked) and the response (trained on)."""

    system: str
    prompt: str
    response: str


def _first(record: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str):
            return value
    return None


def _from_chat(turns: list) -> Example | None:
    if not turns or not all(isinstance(t, dict) for t in turns):
        return None
    role = lambda t: str(t.get("role", t.get("from", ""))).lower()
    text = lambda t: str(t.get("content", t.get("value", "")))
    if role(turns[-1]) not in _ASSISTANT_ROLES:
        return None
    system = "\n".join(text(t) for t in turns[:-1] if role(t) == "system")
    prompt = "\n".join(text(t) for t in turns[:-1] if role(t) != "system")
    return Example(system, prompt, text(turns[-1]))


def to_example(record: object) -> Example | None:
    """The example in one record, or None when the record has no known format."""
    if not isinstance(record, dict):
        return None
    for key in _CHAT_KEYS:
        if isinstance(record.get(key), list):
            return _from_chat(record[key])
    prompt, response = _first(record, _PROMPT_KEYS), _first(record, _RESPONSE_KEYS)
    if prompt is None or response is None:
        return None
    extra = record.get("input")
    if isinstance(extra, str) and extra.strip():
        prompt = f"{prompt}\n{extra}"
    system = record.get("system")
    return Example(system if isinstance(system, str) else "", prompt, response)


#: json.loads recurses on Python's stack: a record nested deeper than that is one error, not a RecursionError.
_TOO_DEEP = (
    "JSON nested too deep to read (more than Python's recursion limit allows); give each record as one object of"
    ' texts, such as {"instruction": ..., "output": ...}'
)


def _parse(path: Path, text: str) -> list:
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{path}: the file is empty; give a JSON array or JSON-lines file of records")
    if stripped[0] == "[":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); fix the file or"
                " convert it to JSON lines"
            ) from None
        except RecursionError:
            raise InputError(f"{path}: {_TOO_DEEP}") from None
        return data
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise InputError(
                f"{path}: line {number} is not valid JSON ({error.msg}); a dataset is a JSON array or one JSON object"
                " per line"
            ) from None
        except RecursionError:
            raise InputError(f"{path}: line {number}: {_TOO_DEEP}") from None
    return records


def load_examples(path: str | Path) -> list[Example]:
    """Read every record of ``path`` (a JSON array, or JSON lines).

    Raises:
        InputError: the file is missing, unreadable, not JSON, empty, or has a record of no known format.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: no such dataset file; give a JSON or JSON-lines file of instruction/response records"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot be read as UTF-8 text ({error}); save the dataset as UTF-8 JSON") from None
    records = _parse(path, text)
    if not isinstance(records, list) or not records:
        raise InputError(f"{path}: holds no records; {_FORMATS_HINT}")
    examples = []
    for number, record in enumerate(records, 1):
        example = to_example(record)
        if example is None:
            raise InputError(f"{path}: record {number} has no known format; {_FORMATS_HINT}")
        examples.append(example)
    return examples
