"""A Hugging Face Trainer fine-tune for the launcher tests (``accelerate launch train_trainer.py``): tiny GPT-2, offline.
``--callback-try-workers 0,1 --callback-then best --callback-out DIR`` records it with ``DlprofCallback`` on every rank
(into DIR/callback), its trials included."""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SEQ = 32


class RandomTokens(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(0, 100, (SEQ,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--callback-try-workers")
    parser.add_argument("--callback-then", default="stop")
    parser.add_argument("--callback-out")
    args = parser.parse_args()
    callbacks = []
    if args.callback_try_workers:
        from dlprof.hf import DlprofCallback

        callbacks.append(DlprofCallback(
            out_dir=args.callback_out, name="callback", wait=1, warmup=1, active=4, reference_steps=4,
            try_workers=args.callback_try_workers, trial_steps=6, then=args.callback_then,
        ))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=SEQ))
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=4, learning_rate=1e-3, report_to=[],
        use_cpu=True, dataloader_num_workers=args.num_workers, save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )
    Trainer(model=model, args=training, train_dataset=RandomTokens(), callbacks=callbacks).train()


if __name__ == "__main__":
    main()
