#!/usr/bin/env python3
"""Turn the raw Brown corpus files and the decoded KJV text into plain training text.

Usage: extract.py BROWN_DIR KJV_TXT OUT_DIR HELDOUT_TXT

Documents: Brown = one file (500); KJV = one chapter (1189). A document goes to the validation
split iff its index within its source satisfies  index % 40 == 17  (deterministic, ~2.5%).
Output format: one sentence (Brown) or verse (KJV) per line, documents separated by a blank line.
Pure standard library; output is byte-identical run to run.
"""
import os
import re
import sys

VALID_MOD, VALID_REM = 40, 17
HELDOUT_BYTES_PER_SOURCE = 15000

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "'", "''", "--"}
ATTACH_RIGHT = {"(", "[", "``", "--"}


def brown_sentence(line):
    words = []
    for tok in line.split():
        cut = tok.rfind("/")
        w = tok[:cut] if cut > 0 else tok
        words.append(w)
    out = ""
    glue_next = True  # no space before the first word
    for w in words:
        text = '"' if w in ("``", "''") else w
        if not glue_next and w not in ATTACH_LEFT:
            out += " "
        out += text
        glue_next = w in ATTACH_RIGHT
    return out.strip()


def brown_docs(brown_dir):
    names = sorted(n for n in os.listdir(brown_dir) if re.fullmatch(r"c[a-r]\d\d", n))
    assert len(names) == 500, f"expected 500 Brown files, found {len(names)}"
    docs = []
    for n in names:
        with open(os.path.join(brown_dir, n), encoding="ascii") as f:
            sents = [brown_sentence(l) for l in f if l.strip()]
        docs.append([s for s in sents if s])
    return docs


REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def kjv_docs(kjv_txt):
    docs, cur, key = [], [], None
    with open(kjv_txt, encoding="latin-1") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = REF.match(line)
            assert m, f"unexpected KJV line: {line[:60]!r}"
            k = (m.group(1), m.group(2))
            if k != key and cur:
                docs.append(cur)
                cur = []
            key = k
            cur.append(m.group(4).strip())
    if cur:
        docs.append(cur)
    assert len(docs) == 1189, f"expected 1189 KJV chapters, found {len(docs)}"
    return docs


def split(docs):
    train = [d for i, d in enumerate(docs) if i % VALID_MOD != VALID_REM]
    valid = [d for i, d in enumerate(docs) if i % VALID_MOD == VALID_REM]
    return train, valid


def write(path, docs):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join("\n".join(d) for d in docs))
        f.write("\n")


def sample(docs, limit):
    out, n = [], 0
    for d in docs:
        lines = []
        for l in d:
            if n + len(l) + 1 > limit:
                break
            lines.append(l)
            n += len(l) + 1
        if lines:
            out.append(lines)
        if n + 200 > limit:
            break
    return out


def main():
    brown_dir, kjv_txt, out_dir, heldout = sys.argv[1:5]
    b_train, b_valid = split(brown_docs(brown_dir))
    k_train, k_valid = split(kjv_docs(kjv_txt))
    os.makedirs(out_dir, exist_ok=True)
    write(os.path.join(out_dir, "train.txt"), b_train + k_train)
    write(os.path.join(out_dir, "valid.txt"), b_valid + k_valid)
    write(os.path.join(out_dir, "valid_brown.txt"), b_valid)
    write(os.path.join(out_dir, "valid_kjv.txt"), k_valid)
    os.makedirs(os.path.dirname(heldout) or ".", exist_ok=True)
    write(heldout, sample(b_valid, HELDOUT_BYTES_PER_SOURCE) + sample(k_valid, HELDOUT_BYTES_PER_SOURCE))
    for name in ("train.txt", "valid.txt"):
        p = os.path.join(out_dir, name)
        print(f"{p}: {os.path.getsize(p)} bytes")
    print(f"{heldout}: {os.path.getsize(heldout)} bytes")
    print(f"docs: brown train {len(b_train)} valid {len(b_valid)}; kjv train {len(k_train)} valid {len(k_valid)}")


if __name__ == "__main__":
    main()
