#!/usr/bin/env python3
"""Train the tiny model's byte-level BPE (vocab 6144, SPEC 8.7) with HF `tokenizers`.

  python3 tools/train_tokenizer.py --corpus data/corpus/train.txt --out models/tiny-dsa/tokenizer.json

Layout as DeepSeek-V3's tokenizer.json: model BPE, byte-level pre-tokenizer (GPT-2 split regex) and
decoder, special tokens <｜begin▁of▁sentence｜> = 0 and <｜end▁of▁sentence｜> = 1 as added_tokens (the
ids config.json records as bos_token_id/eos_token_id). No post-processor: callers add BOS.
--smoke writes the merge-free byte-level tokenizer instead (no `tokenizers` needed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_ref.config import BOS_TOKEN, EOS_TOKEN  # noqa: E402
from dsa_ref.tokenizer import write_bytelevel_tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/corpus/train.txt")
    ap.add_argument("--out", default="models/tiny-dsa/tokenizer.json")
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    if a.smoke:
        write_bytelevel_tokenizer(a.out, a.vocab)
        print(f"[tokenizer] wrote byte-level smoke tokenizer {a.out}")
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, min_frequency=2, special_tokens=[BOS_TOKEN, EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with open(a.corpus, encoding="utf-8") as f:
        docs = f.read().split("\n\n")
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    assert tok.token_to_id(BOS_TOKEN) == 0 and tok.token_to_id(EOS_TOKEN) == 1
    assert tok.get_vocab_size() <= a.vocab, tok.get_vocab_size()
    tok.save(a.out)
    n = sum(len(e.ids) for e in tok.encode_batch(docs[:200]))
    c = sum(len(d) for d in docs[:200])
    print(f"[tokenizer] vocab {tok.get_vocab_size()}, {c / max(n, 1):.2f} chars/token on 200 docs -> {a.out}")


if __name__ == "__main__":
    main()
