"""test_hf_tokenizer_json.py - tokenizer.json files of the paper's families through mor-convert.

tests/tokenizer/hf_tokenizer_json.py turns llama.cpp's vocabulary files
(tests/data/tokenizer/llama.cpp/) into the tokenizer.json files transformers
writes: from llama-spm, Llama's (legacy: Prepend + Replace normalizer; since
4.41: a Metaspace pre-tokenizer with prepend_scheme "first") and Gemma's
(Replace normalizer, no prefix), a BPE with byte_fallback and the merges made
from the vocabulary's scores; from mpt (GPT-NeoX's vocabulary), GPT-NeoX's
and Pythia's (byte-level BPE, NFC normalizer, runs of spaces as added
tokens). `mor-convert --vocab-only DIR` converts each, and libmor (through
the Python bindings) must give llama.cpp's ids for every text of llama.cpp's
suite and of libmor's extra texts:
  - llama-legacy: the suite's ids (SentencePiece with its dummy prefix);
  - gemma: llama.cpp's ids without the dummy prefix (add_space_prefix false);
  - llama (Metaspace "first"): no U+2581 is added before a text that starts
    with a space, so those texts give the ids without the prefix, the others
    those with it;
  - gpt-neox: the mpt suite's ids for texts already in NFC; for the others,
    the ids of their NFC (CPython's unicodedata) from llama.cpp's mpt file,
    which does not normalize. Texts naming llama.cpp's "[PAD...]" filler
    tokens, which HF's tokenizer does not have, are left out.
Decoding gives the text back where it should (legacy, gemma), and BOS and
add_bos come from the post-processor and tokenizer_config.json.
"""
import os
import subprocess
import sys
import tempfile
import unicodedata

import testlib as t

mor = t.import_mor()
sys.path.insert(0, os.path.join(t.ROOT, "tests", "tokenizer"))
import gguf_min  # noqa: E402
import hf_tokenizer_json  # noqa: E402

DATA = os.path.join(t.ROOT, "tests", "data", "tokenizer", "llama.cpp")
CONVERT = os.path.join(t.OUT, "bin", "mor-convert")
SEP = b"\n__ggml_vocab_test__\n"
SP = "\u2581".encode()


def read_suite(inp, out):
    with open(os.path.join(DATA, inp), "rb") as f:
        texts = f.read().split(SEP)
    with open(os.path.join(DATA, out)) as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split("\n")]
    if len(ids) == len(texts) + 1 and ids[-1] == []:   # the file's last newline
        ids.pop()
    if not t.check(len(texts) == len(ids) and len(texts) > 40, "%s / %s: %d texts" % (inp, out, len(texts))):
        t.finish()
    return list(zip(texts, ids))


def main():
    with_prefix = read_suite("ggml-vocab-llama-spm.gguf.inp", "ggml-vocab-llama-spm.gguf.out") + \
        read_suite("extra.inp", "ggml-vocab-llama-spm.gguf.extra.out")
    without = read_suite("ggml-vocab-llama-spm.gguf.inp", "llama-spm-noprefix.out") + \
        read_suite("extra.inp", "llama-spm-noprefix.extra.out")
    t.check([a for a, _ in with_prefix] == [a for a, _ in without], "the same texts with and without the prefix")
    kvs = gguf_min.read(os.path.join(DATA, "ggml-vocab-llama-spm.gguf"))
    with tempfile.TemporaryDirectory() as tmp:
        for variant in hf_tokenizer_json.SPM_VARIANTS:
            d = os.path.join(tmp, variant)
            hf_tokenizer_json.write(kvs, variant, d)
            gguf = os.path.join(tmp, variant + ".gguf")
            p = subprocess.run([CONVERT, "--vocab-only", d, "-o", gguf], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True)
            if not t.check(p.returncode == 0 and "model llama" in p.stdout,
                           "%s: mor-convert --vocab-only (%s)" % (variant, (p.stdout + p.stderr).strip()[:200])):
                continue
            m = mor.Model(gguf, vocab_only=True)
            t.check(m.token_bos == 1 and m.token_eos == 2 and m.add_bos == 1, "%s: BOS <s>, EOS </s>, add_bos" % variant)
            bad, back, n_back = [], 0, 0
            for (text, want_p), (_, want_n) in zip(with_prefix, without):
                if variant == "gemma" or (variant == "llama" and text.startswith(b" ")):
                    want = want_n
                else:
                    want = want_p
                got = m.tokenize(text, parse_user_defined=True)
                if got != want:
                    bad.append(text[:30])
                if variant != "llama" and SP not in text:
                    n_back += 1
                    back += m.detokenize(got) == text
            t.check(not bad, "%s: %d texts give llama.cpp's ids %s" % (variant, len(with_prefix), bad[:3]))
            if variant != "llama":
                t.check(back == n_back, "%s: %d of %d texts decode back" % (variant, back, n_back))
            t.check(m.tokenize("Hello", add_bos=True) == [1, 15043 if variant != "gemma" else 10994],
                    "%s: ADD_BOS puts <s> first" % variant)
            m.close()
        neox(tmp)
    t.finish()


def neox(tmp):
    d = os.path.join(tmp, "gpt-neox")
    mpt = os.path.join(DATA, "ggml-vocab-mpt.gguf")
    hf_tokenizer_json.write(gguf_min.read(mpt), "gpt-neox", d)
    gguf = os.path.join(tmp, "gpt-neox.gguf")
    p = subprocess.run([CONVERT, "--vocab-only", d, "-o", gguf], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if not t.check(p.returncode == 0 and "model gpt2" in p.stdout,
                   "gpt-neox: mor-convert --vocab-only (%s)" % (p.stdout + p.stderr).strip()[:200]):
        return
    m, ref = mor.Model(gguf, vocab_only=True), mor.Model(mpt, vocab_only=True)
    t.check(m.meta("mor.tokenizer.normalizer") == "nfc" and m.n_vocab == 50277 and m.add_bos == 0,
            "gpt-neox: NFC, 50277 tokens, no BOS")
    cases = read_suite("ggml-vocab-mpt.gguf.inp", "ggml-vocab-mpt.gguf.out") + \
        read_suite("extra.inp", "ggml-vocab-mpt.gguf.extra.out")
    bad, n, n_nfc, back, n_back = [], 0, 0, 0, 0
    for text, want in cases:
        if b"[PAD" in text:
            continue
        n += 1
        nfc = unicodedata.normalize("NFC", text.decode("utf-8")).encode("utf-8")
        if nfc != text:
            n_nfc += 1
            want = ref.tokenize(nfc, parse_user_defined=True)
        got = m.tokenize(text, parse_user_defined=True)
        if got != want:
            bad.append(text[:30])
        n_back += 1
        back += m.detokenize(got) == nfc
    t.check(not bad and n_nfc > 0, "gpt-neox: %d texts give llama.cpp's ids (%d of them after NFC) %s" %
            (n, n_nfc, bad[:3]))
    t.check(back == n_back, "gpt-neox: %d of %d texts decode to their NFC" % (back, n_back))
    m.close()
    ref.close()


if __name__ == "__main__":
    main()
