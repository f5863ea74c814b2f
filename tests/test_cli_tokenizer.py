"""test_cli_tokenizer.py - the tokenizer through the command-line contract.

Builds GPT-2's tokenizer.json (HF format) from the committed merges, runs
`bin/mor-convert --vocab-only DIR -o V.gguf`, then
`bin/mor-run -m V.gguf --tokenize-file T.txt` on the oracle cases of
tests/data/tokenizer/cases.txt (GPT-2 pre-tokenizer, special tokens parsed),
and compares the printed ids with the oracle's.
"""
import json
import os
import subprocess
import tempfile

import testlib as t

DATA = os.path.join(t.ROOT, "tests", "data", "tokenizer")
CONVERT = os.path.join(t.OUT, "bin", "mor-convert")
RUN = os.path.join(t.OUT, "bin", "mor-run")


def build_tokenizer_json(path, specials):
    vocab = {c: i for i, c in enumerate(t.gpt2_byte_chars().values())}
    merges = []
    with open(os.path.join(DATA, "gpt2-merges.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            a, b = line.split(" ")
            merges.append(line)
            vocab.setdefault(a + b, len(vocab))
    added = [{"id": i, "content": text, "special": typ == 3, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": typ != 3} for i, typ, text in specials]
    tok = {"version": "1.0", "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return len(vocab)


def main():
    specials, cases = [], []
    with open(os.path.join(DATA, "cases.txt")) as f:
        for line in f:
            p = line.split()
            if not p or p[0].startswith("#"):
                continue
            if p[0] == "special":
                specials.append((int(p[1]), int(p[2]), bytes.fromhex(p[3]).decode("utf-8")))
            elif p[0] == "case" and p[1] == "gpt2":
                text = b"" if p[3] == "-" else bytes.fromhex(p[3])
                # --tokenize-file parses special tokens; a case without them
                # tokenizes the same either way
                if p[2] == "1" or not any(s.encode() in text for _, _, s in specials):
                    cases.append((text, [int(x) for x in p[5:5 + int(p[4])]]))
    t.check(len(cases) > 50, "%d gpt2 cases" % len(cases))
    cases = cases[::3]   # every third: each one is a process start with the 50k vocabulary
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "gpt2")
        os.makedirs(d)
        n = build_tokenizer_json(os.path.join(d, "tokenizer.json"), specials)
        t.check(n == 50256, "tokenizer.json has the 50256 GPT-2 BPE tokens (+ %d added)" % len(specials))
        gguf = os.path.join(tmp, "v.gguf")
        p = subprocess.run([CONVERT, "--vocab-only", d, "-o", gguf], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if not t.check(p.returncode == 0, "mor-convert --vocab-only (%s)" % p.stderr.strip()[:200]):
            t.finish()
        bad = []
        for i, (text, want) in enumerate(cases):
            txt = os.path.join(tmp, "t.txt")
            with open(txt, "wb") as f:
                f.write(text)
            p = subprocess.run([RUN, "-m", gguf, "--tokenize-file", txt], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            got = [int(x) for x in p.stdout.split()] if p.returncode == 0 else None
            if got != want:
                bad.append((text[:40], got, want))
        t.check(not bad, "mor-run --tokenize-file prints the oracle ids for all %d cases %s" % (len(cases), bad[:3]))
    t.finish()


if __name__ == "__main__":
    main()
