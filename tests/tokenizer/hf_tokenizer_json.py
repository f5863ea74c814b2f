"""hf_tokenizer_json.py - a Hugging Face tokenizer.json from a llama.cpp vocab file.

    python3 tests/tokenizer/hf_tokenizer_json.py VOCAB.gguf VARIANT OUT_DIR

writes OUT_DIR/tokenizer.json (and tokenizer_config.json) as transformers' converters write them
(Python standard library only; no model hub is reachable). From a SentencePiece vocabulary
(tokenizer.ggml.model "llama", with scores):

  model     BPE with byte_fallback, unk_token, fuse_unk; the vocabulary is the file's tokens; the
            merges are what transformers' SentencePieceExtractor makes of a vocabulary with scores:
            every split of every token into two tokens, ordered by the token's score, highest first
            (ties: by the token's id, then by the two halves' ids);
  VARIANT   llama-legacy  normalizer Prepend("\u2581") + Replace(" ", "\u2581"), no pre-tokenizer
                          (LlamaConverter with legacy=True: Llama 2, TinyLlama);
            llama         Metaspace(prepend_scheme "first", split false), no normalizer
                          (LlamaConverter with legacy=False);
            gemma         normalizer Replace(" ", "\u2581"), pre-tokenizer Split(" ",
                          merged_with_previous), no prefix (GemmaConverter);
  added     the control and unknown tokens (special), user-defined ones (not special);
  post      TemplateProcessing "<s> $A" (BOS first); the decoders of each converter.

From a byte-level vocabulary (tokenizer.ggml.model "gpt2", with merges), VARIANT gpt-neox: GPT-NeoX's
(and Pythia's) tokenizer.json: normalizer NFC, ByteLevel pre-tokenizer, post-processor and decoder,
the file's merges; the control tokens and the user-defined ones (GPT-NeoX's runs of spaces) as added
tokens, the normal ones in the model's vocabulary, and without the "[PAD...]" fillers llama.cpp's
converter appends up to the model's vocabulary size.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_min  # noqa: E402

SP = "\u2581"
SPM_VARIANTS = ("llama-legacy", "llama", "gemma")
VARIANTS = SPM_VARIANTS + ("gpt-neox",)


def merges_by_score(tokens, scores):
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, piece in enumerate(tokens):
        local = [(piece[:k], piece[k:], scores[i]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)   # stable: equal scores keep the order above
    return [a + " " + b for a, b, _ in merges]


def build_neox(kvs):
    tokens = gguf_min.get(kvs, "tokenizer.ggml.tokens")[1]
    types = gguf_min.get(kvs, "tokenizer.ggml.token_type")[1]
    merges = gguf_min.get(kvs, "tokenizer.ggml.merges")[1]
    n = len(tokens)
    while n and types[n - 1] == 4 and tokens[n - 1].startswith("[PAD"):
        n -= 1
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": types[i] == 4, "special": types[i] == 3} for i in range(n) if types[i] in (3, 4)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"}, "pre_tokenizer": byte_level, "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False,
                  "vocab": {tokens[i]: i for i in range(n) if types[i] in (1, 3)}, "merges": merges},
    }
    eot = tokens[gguf_min.get(kvs, "tokenizer.ggml.eos_token_id")]
    config = {"add_bos_token": False, "add_eos_token": False, "bos_token": eot, "eos_token": eot,
              "unk_token": eot, "tokenizer_class": "GPTNeoXTokenizer"}
    return tok, config


def build(kvs, variant):
    """(tokenizer.json, tokenizer_config.json) as dicts."""
    if variant not in VARIANTS:
        raise ValueError("variant must be one of " + ", ".join(VARIANTS))
    if variant == "gpt-neox":
        return build_neox(kvs)
    tokens = gguf_min.get(kvs, "tokenizer.ggml.tokens")[1]
    scores = gguf_min.get(kvs, "tokenizer.ggml.scores")[1]
    types = gguf_min.get(kvs, "tokenizer.ggml.token_type")[1]
    bos = tokens[gguf_min.get(kvs, "tokenizer.ggml.bos_token_id")]
    eos = tokens[gguf_min.get(kvs, "tokenizer.ggml.eos_token_id")]
    unk = tokens[gguf_min.get(kvs, "tokenizer.ggml.unknown_token_id")]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": ty != 4} for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (2, 3, 4)]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SP}
    decoders = [{"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    if variant == "llama-legacy":
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP}, replace]}
        pre = None
    elif variant == "llama":
        normalizer = None
        pre = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
    else:
        normalizer = replace
        pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
    if variant != "gemma":
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {bos: {"id": bos, "ids": [tokens.index(bos)], "tokens": [bos]}}},
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges_by_score(tokens, scores)},
    }
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": bos, "eos_token": eos, "unk_token": unk,
              "legacy": variant == "llama-legacy", "tokenizer_class": "GemmaTokenizer" if variant == "gemma"
              else "LlamaTokenizer"}
    return tok, config


def write(kvs, variant, out_dir):
    tok, config = build(kvs, variant)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    write(gguf_min.read(sys.argv[1]), sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
