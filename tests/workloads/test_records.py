"""``load_examples`` on every accepted record format, and on the bundled dataset."""

from __future__ import annotations

import json

import pytest

from dlprof.workloads.lora import DEFAULT_DATASET
from dlprof.workloads.records import Example, load_examples


def write_json(tmp_path, records) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            {"instruction": "Translate", "input": "hello", "output": "bonjour"},
            Example("", "Translate\nhello", "bonjour"),
        ),
        (
            {"instruction": "Say hi", "input": "  ", "output": "hi", "system": "Be brief."},
            Example("Be brief.", "Say hi", "hi"),
        ),
        ({"query": "2+2?", "response": "4"}, Example("", "2+2?", "4")),
        ({"prompt": "Once upon", "completion": " a time"}, Example("", "Once upon", " a time")),
        ({"question": "Who?", "answer": "Me."}, Example("", "Who?", "Me.")),
    ],
    ids=["alpaca", "alpaca-blank-input-system", "query-response", "prompt-completion", "question-answer"],
)
def test_flat_formats(tmp_path, record, expected):
    assert load_examples(write_json(tmp_path, [record])) == [expected]


def test_messages_with_system_and_several_turns(tmp_path):
    messages = [
        {"role": "system", "content": "You are dlprof."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "A profiler."},
    ]
    assert load_examples(write_json(tmp_path, [{"messages": messages}])) == [
        Example("You are dlprof.", "Hi\nHello\nWho are you?", "A profiler.")
    ]


def test_sharegpt_conversations(tmp_path):
    turns = [{"from": "human", "value": "你好"}, {"from": "gpt", "value": "你好！"}]
    assert load_examples(write_json(tmp_path, [{"conversations": turns}])) == [Example("", "你好", "你好！")]


def test_json_lines(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n\n{"query": "c", "response": "d"}\n', encoding="utf-8")
    assert load_examples(path) == [Example("", "a", "b"), Example("", "c", "d")]


def test_bundled_dataset_has_chinese_and_english():
    examples = load_examples(DEFAULT_DATASET)
    assert len(examples) >= 100
    has_cjk = [any("\u4e00" <= ch <= "\u9fff" for ch in e.prompt + e.response) for e in examples]
    assert any(has_cjk)
    assert any(not cjk and any(ch.isascii() and ch.isalpha() for ch in e.prompt) for cjk, e in zip(has_cjk, examples))
    assert all(e.prompt and e.response for e in examples)
