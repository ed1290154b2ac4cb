"""Tokenizer access: HF `tokenizers` when importable; else a pure-Python byte-level BPE that reads the
same tokenizer.json (exact for tokenizers without merges such as the --smoke one; with merges it
uses an approximation of the GPT-2 split regex unless the `regex` module is present)."""
import json
import re
from typing import List

from .config import BOS_TOKEN, EOS_TOKEN


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class PyByteLevelBPE:
    def __init__(self, path: str):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        m = j["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.inv = {v: k for k, v in self.vocab.items()}
        for t in j.get("added_tokens", []):
            self.inv[t["id"]] = t["content"]
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m.get("merges", [])]
        self.ranks = {p: i for i, p in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        try:
            import regex
            self.pat = regex.compile(GPT2_PATTERN)
        except ImportError:
            self.pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+|_+""")

    def _bpe(self, word: str) -> List[str]:
        parts = list(word)
        while len(parts) > 1:
            best = min(((self.ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))))
            if best[0] == 1 << 60:
                break
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        return parts

    def encode(self, text: str) -> List[int]:
        ids = []
        for piece in self.pat.findall(text):
            u = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            ids += [self.vocab[p] for p in self._bpe(u)]
        return ids

    def decode(self, ids: List[int]) -> str:
        s = "".join(self.inv[i] for i in ids)
        return bytes(self.u2b[c] for c in s if c in self.u2b).decode("utf-8", errors="replace")

    def token_to_id(self, t: str) -> int:
        for k, v in self.inv.items():
            if v == t:
                return k
        return self.vocab[t]


class HFTok:
    def __init__(self, path: str):
        from tokenizers import Tokenizer
        self.t = Tokenizer.from_file(path)

    def encode(self, text: str) -> List[int]:
        return self.t.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: List[str]) -> List[List[int]]:
        return [e.ids for e in self.t.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: List[int]) -> str:
        return self.t.decode(ids)

    def token_to_id(self, t: str) -> int:
        return self.t.token_to_id(t)


def load_tokenizer(path: str):
    try:
        return HFTok(path)
    except ImportError:
        return PyByteLevelBPE(path)


def write_bytelevel_tokenizer(path: str, vocab_size: int) -> None:
    """The --smoke tokenizer: ids 0/1 = BOS/EOS, 2..257 = the 256 byte symbols, no merges.
    Same tokenizer.json layout as train_tokenizer.py writes (vocab_size is informational)."""
    b2u = bytes_to_unicode()
    vocab = {BOS_TOKEN: 0, EOS_TOKEN: 1}
    for b in range(256):
        vocab[b2u[b]] = 2 + b
    json.dump(tokenizer_json(vocab, []), open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=1)


def special(tok: str, i: int):
    return {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json(vocab, merges):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(BOS_TOKEN, 0), special(EOS_TOKEN, 1)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
