"""gen_llamacpp_oracle.py - regenerate libmor's extra cases for llama.cpp's tokenizer suites.

    python3 tests/tokenizer/gen_llamacpp_oracle.py LLAMA_CPP_BUILD/bin/test-tokenizer-0

Writes, in tests/data/tokenizer/llama.cpp/:
  extra.inp                        the CASES below, in llama.cpp's .inp format (separated by
                                   "\\n__ggml_vocab_test__\\n");
  ggml-vocab-NAME.gguf.extra.out   for every vocabulary there, one line of token ids per case,
                                   as llama.cpp tokenizes it (test-tokenizer-0 FILE TEXT: no BOS,
                                   special tokens not parsed, user-defined ones matched);
  llama-spm-noprefix.extra.out     the same for ggml-vocab-llama-spm.gguf with
                                   tokenizer.ggml.add_space_prefix = false (a Gemma-like
                                   SentencePiece without the dummy prefix), written to a temporary
                                   file for llama.cpp to read;
  llama-spm-noprefix.out           and for the texts of llama.cpp's own llama-spm suite.
Only llama.cpp's built tokenizer test is run (the peer's oracle); nothing is downloaded. The cases
are valid UTF-8 (llama.cpp replaces invalid bytes) and use characters of old Unicode versions, so
that the two programs' Unicode tables agree on them.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_min  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "data", "tokenizer", "llama.cpp")
SEP = "\n__ggml_vocab_test__\n"
VOCABS = ["llama-spm", "gpt-2", "starcoder", "refact", "falcon", "mpt", "deepseek-coder", "deepseek-llm"]

CASES = [
    "Hello, world! How's it going? I'm fine; you're great. We'll see, they've gone, she'd know.",
    "  two leading spaces", "trailing spaces   ", " one space each side ",
    "\t\ttabs\tand\nnewlines\r\nCRLF\r\n", "\n\n\n\n", " \n \n", "\r\r\n\n\r", "\n", " ", "a",
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 -42 +7 0x1F 1e-5",
    "\uff12\uff10\uff12\uff14 \u00bd \u2153 \u216b \u0663\u0664\u0665 \u0967\u0968",
    "!!! ??? ... --- ;;; ::: ((( ))) [[[ ]]] {{{ }}} <<< >>> $$$ %%% ^^^ ~~~ ||| ``` @@@ ### &&& *** ___",
    "a+b=c; x<y>z; p^q~r|s`t$u",
    "def f(x):\n    return x**2 + 3*x - 1  # comment\n\nif __name__ == '__main__':\n\tprint(f(10))\n",
    "int main(void) { printf(\"%d\\n\", a[i] >= b ? a : b); return 0; }",
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"
    "\u3001\u30ab\u30bf\u30ab\u30ca\u3002 \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac"
    " \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03b1. \u03a9mega \u00b5icro \ufb01ligature",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 e\u0301 a\u0308\u0304 \u00c5str\u00f6m \u00f8re",
    "\U0001f999\U0001f680\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "a\u00a0b\u2009c\u3000d\u202fe\u0085f\u200bg \u3000\u3000x",
    "\uff08\u5168\u89d2\uff09\uff01\uff1f\uff1a\uff1b\uff0c\u3002\u300c\u5f15\u7528\u300d\u300e\u4e8c\u91cd\u300f",
    "a  b   c    d     e", "                        24 spaces", "    indented\n        more\n\t\t  mixed",
    "' 's 't 're 've 'm 'll 'd ''' '' x's X'S I'M it\u2019s",
    "<|endoftext|> <s> </s> <unk> <fim_prefix> >>TITLE<< <\uff5cbegin\u2581of\u2581sentence\uff5c>",
    "\u00f5\u00f7\u00c1\u00fd \u00c0 \u00ff \u00f8\u00fa\u00fe \u00fc\u00f9\u00f6\u00fb [PAD100015] [PAD50300]",
    "https://example.com/path?q=1&r=2#frag user@example.org",
    "abc123def 12ab 2024-01-15 v1.2.3 x=1;y=22;z=333 H2O CO2",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "\u2581 \u2581\u2581hello \u2581world", "<0x41> <0x0A>",
    "\u2211\u222b\u221a\u221e\u2260\u2264\u2265 \u00b1 \u00d7 \u00f7 \u2192 \u21d2 \u2200\u2203 \u2208 \u2209",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd"
    " \u05e2\u05d5\u05dc\u05dd \u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"
    " \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! the_quick_brown_fox",
    "Mr. O'Neil's dog isn't here; \"quotes\" and 'singles' (parens) [brackets] {braces}",
    "line one\nline two\n\nparagraph\n   \n  end",
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u00ab guillemets \u00bb \u2014 dash \u2013 en \u2026 ellipsis \u2022 bullet",
    "x" * 300, "ab" * 100 + " " + "123" * 50,
    "\x01\x02\x03 a\x1fb \x7f\x08 c\x1b[0m", "abc \u3000", "x \u3000\u3000", "tail \n\t ",
    "\uff11\uff12\uff13\uff14\uff15\uff16\uff17 \u0661\u0662\u0663\u0664", "\u3002\u3001\uff01 \u3001\u3001a",
    "\u2018quoted\u2019 \u201cdouble\u201d \u201e\u201f", "\ufeffBOM \u00adsoft\u00adhyphen \ufffd",
    "e.g. i.e. U.S.A. 3.5% $4.99 #1 @user #hashtag 50/50 1/2 C++ C# F#",
]


def run_llamacpp(tool, vocab, text, tmp):
    path = os.path.join(tmp, "case.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    p = subprocess.run([tool, vocab, path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("%s failed on %s: %s" % (tool, vocab, p.stderr.decode()[-300:]))
    with open(path + ".tokcpp") as f:
        return [int(x) for x in f.read().split()]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    tool = sys.argv[1]
    with open(os.path.join(DATA, "extra.inp"), "w", encoding="utf-8", newline="") as f:
        f.write(SEP.join(CASES))
    with tempfile.TemporaryDirectory() as tmp:
        kvs = gguf_min.read(os.path.join(DATA, "ggml-vocab-llama-spm.gguf"))
        noprefix = os.path.join(tmp, "llama-spm-noprefix.gguf")
        gguf_min.write(noprefix, gguf_min.replace(kvs, "tokenizer.ggml.add_space_prefix", gguf_min.BOOL, False))
        jobs = [(os.path.join(DATA, "ggml-vocab-%s.gguf" % v), "ggml-vocab-%s.gguf.extra.out" % v) for v in VOCABS]
        jobs.append((noprefix, "llama-spm-noprefix.extra.out"))
        with open(os.path.join(DATA, "ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8", newline="") as f:
            suite = f.read().split(SEP)
        jobs = [(v, o, CASES) for v, o in jobs] + [(noprefix, "llama-spm-noprefix.out", suite)]
        for vocab, out, cases in jobs:
            lines = [" " + " ".join(str(i) for i in run_llamacpp(tool, vocab, c, tmp)) for c in cases]
            with open(os.path.join(DATA, out), "w") as f:
                f.write("\n".join(lines) + "\n")
            print("wrote %s (%d cases)" % (out, len(cases)))


if __name__ == "__main__":
    main()
