"""Train the byte-level BPE tokenizer shipped with the built-in workload (dlprof/workloads/data/tokenizer.json).

Run from the repository root: ``python scripts/make_tokenizer.py``. Deterministic for a given
`tokenizers` version; takes about a second.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

DATA_DIR = Path(__file__).resolve().parents[1] / "dlprof" / "workloads" / "data"
#: Small enough that the tiny model's embedding stays small, large enough that Chinese text does not
#: fall back to ~3 byte tokens per character.
VOCAB_SIZE = 3000
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def texts(records: list[dict]) -> list[str]:
    return [" ".join(str(r.get(k, "")) for k in ("instruction", "input", "output")) for r in records]


def main() -> None:
    records = json.loads((DATA_DIR / "self_cognition.json").read_text(encoding="utf-8"))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts(records), trainer=trainer)
    out = DATA_DIR / "tokenizer.json"
    tokenizer.save(str(out))
    print(f"wrote {out} ({tokenizer.get_vocab_size()} tokens)")


if __name__ == "__main__":
    main()
