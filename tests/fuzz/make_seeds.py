#!/usr/bin/env python3
"""make_seeds.py - write the fuzzers' seed corpora and tiny models (stdlib only).

    python3 tests/fuzz/make_seeds.py        # from the repository root

Writes, deterministically (the outputs are committed; rerun after a format
change and commit what changed):
  tests/fuzz/models/*.gguf   tiny models the decode, tokenizer, thread and
                             fault tests load: plain, expert-choice (recursion-
                             wise and KV-shared, linear and MLP routers),
                             token-choice (MLP router, bias), and vocab-only
                             tokenizers: byte-level BPE with GPT-2's first 2000
                             merges (pre gpt2, smollm, falcon, deepseek-coder,
                             deepseek-llm, mpt with NFC) and two SentencePiece-style
                             ones made from them (by score; by merges)
  tests/fuzz/corpus/<target>/  small valid inputs of each fuzz target (chat_template:
                             a few models' templates of tests/data/chat_templates
                             and one that uses every feature)
Everything is small (a few KB per file) so that mutations reach the headers.
*.gguf is in .gitignore: add new .gguf outputs with `git add -f`.
"""
import io
import json
import os
import struct
import sys
import zipfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(ROOT, "tests", "fuzz")
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402  (GPT-2's byte alphabet)

# ---------------------------------------------------------------------------
# chat_template seeds: models' templates that render the fuzz target's
# conversation, and one template that uses every feature of the subset
CHAT_TEMPLATE_SEEDS = ["microsoft-Phi-3.5-mini-instruct", "Qwen-Qwen2.5-7B-Instruct", "HuggingFaceTB-SmolLM3-3B",
                       "meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen3-0.6B", "mistralai-Ministral-3-14B-Reasoning-2512"]
CHAT_TEMPLATE_FEATURES = b"""{#- every construct of the subset, once -#}
{%- set ns = namespace(n=0, parts=[], last=none) -%}
{%- macro render(m, sep='\n') -%}
  {%- if m.content is string -%}{{ m.content | trim }}
  {%- elif m.content is iterable -%}{{ m.content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join(sep) }}
  {%- else -%}{{ caller() if caller is defined else '' }}{%- endif -%}
{%- endmacro -%}
{{ bos_token }}{% for m in messages if m.role != 'tool' %}
{%- set ns.n = ns.n + 1 -%}{% set ns.parts = ns.parts + [m.role | upper] %}
<{{ loop.index }}/{{ loop.length }}|{{ m.role }}{{ '|first' if loop.first }}{{ '|last' if loop.last else '' }}>
{{- render(m) -}}
{%- if m.tool_calls is defined and m.tool_calls -%}
  {%- for tc in m.tool_calls -%}{% set f = tc.function %}
[{{ f.name }}({% for k, v in f.arguments.items() %}{{ k }}={{ v | tojson }}{{ ', ' if not loop.last }}{% endfor %})]
  {%- endfor -%}
{%- endif -%}
{%- if m.reasoning_content %}<think>{{ m.reasoning_content.split('.')[0] ~ '.' }}</think>{% endif -%}
{%- if loop.previtem is defined and loop.previtem.role == m.role %}{% continue %}{% endif %}
{% else %}no messages{% endfor %}
{%- set block %}  {{ ns.parts | join(',') | lower }}  {% endset -%}
[{{ block | trim }}|{{ ns.n }}|{{ (ns.n * 3 // 2) ** 2 % 7 }}|{{ 10 / 4 }}|{{ -7 // 2 }}|{{ 'abc'[::-1] }}|{{ [1, 2, 3][1:] }}]
{%- if tools is not none %}{{ tools | tojson(indent=2) }}{{ tools | map(attribute='function.name') | list }}{% endif %}
{{- {'b': 1, 'a': [true, none, 2.5]} | dictsort | tojson }}{{ 'x' in 'xyz' and 2 not in [1] }}
{%- filter upper %}{{ 'f' ~ 1 }}{% endfilter %}{% generation %}{{ eos_token }}{% endgeneration %}
{{- strftime_now('%Y-%m-%d') }}{{ range(3) | list }}{{ '{}-{}'.format('a', 'b') }}{{ enable_thinking }}
{%- if add_generation_prompt %}<assistant>{% endif -%}
"""


# a template, a NUL, then the messages JSON the fuzz target renders it with
CHAT_TEMPLATE_OWN_MESSAGES = (b"{% for m in messages %}<{{ m.role }}>{{ m.content if m.content is string else "
                              b"m.content | tojson }}{% endfor %}\x00" + json.dumps([
                                  {"role": "user", "content": "Hi \u00e9 \ud83d\ude00", "n": [1, -2.5e-3, True, None]},
                                  {"role": "assistant", "content": [{"type": "text", "text": "a\\b\"c\n"}]}]).encode())


# ---------------------------------------------------------------------------
# GGUF v3 writer
# ---------------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
T_F32, T_F16, T_BF16 = 0, 1, 30


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


class Gguf:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def tensor(self, name, dims, ttype=T_F32, seed=1, scale=0.2, const=None):
        n = 1
        for d in dims:
            n *= d
        vals = []
        x = seed * 2654435761 & 0xFFFFFFFF
        for i in range(n):
            if const is not None:
                vals.append(const)
                continue
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            vals.append(((x >> 8) % 2001 - 1000) / 1000.0 * scale)
        if ttype == T_F32:
            data = struct.pack("<%df" % n, *vals)
        elif ttype == T_F16:
            data = struct.pack("<%de" % n, *vals)
        else:  # BF16: the top half of the float32
            data = b"".join(struct.pack("<f", v)[2:] for v in vals)
        self.tensors.append((name, dims, ttype, data))

    @staticmethod
    def value(vtype, v):
        if vtype == STR:
            return gstr(v)
        if vtype == ARR:
            et, items = v
            out = struct.pack("<IQ", et, len(items))
            for it in items:
                out += Gguf.value(et, it)
            return out
        fmt = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
               U64: "Q", I64: "q", F64: "d"}[vtype]
        return struct.pack("<" + fmt, v)

    def bytes(self, align=32):
        out = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for k, t, v in self.kv:
            out += gstr(k) + struct.pack("<I", t) + self.value(t, v)
        data = b""
        for name, dims, ttype, blob in self.tensors:
            data += b"\0" * (-len(data) % align)
            out += gstr(name) + struct.pack("<I", len(dims))
            out += b"".join(struct.pack("<Q", d) for d in dims)
            out += struct.pack("<IQ", ttype, len(data))
            data += blob
        out += b"\0" * (-len(out) % align)
        return out + data


ROLES = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
         "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]


def model(V=64, d=8, F=16, H=2, Hkv=1, hd=4, prelude=0, n_rec=1, K=2, coda=0, sharing="none",
          router="none", arch="linear", func="sigmoid", alpha=0.1, kv_shared=None, bias=False,
          wtype=T_F32, untied=False, role_map=None, tokenizer=None, ctx=64, gating=None):
    g = Gguf()
    L = prelude + n_rec * K + coda
    g.add("general.architecture", STR, "mor")
    g.add("mor.format_version", U32, 1)
    g.add("mor.vocab_size", U32, V)
    g.add("mor.context_length", U32, ctx)
    g.add("mor.embedding_length", U32, d)
    g.add("mor.feed_forward_length", U32, F)
    g.add("mor.attention.head_count", U32, H)
    g.add("mor.attention.head_count_kv", U32, Hkv)
    g.add("mor.attention.key_length", U32, hd)
    g.add("mor.attention.layer_norm_rms_epsilon", F32, 1e-5)
    g.add("mor.rope.freq_base", F32, 10000.0)
    g.add("mor.layer_count", U32, L)
    g.add("mor.recursion.count", U32, n_rec)
    g.add("mor.recursion.base_depth", U32, K)
    g.add("mor.recursion.prelude", U32, prelude)
    g.add("mor.recursion.coda", U32, coda)
    g.add("mor.recursion.sharing", STR, sharing)
    if sharing in ("cycle", "middle_cycle"):
        lmap = list(range(prelude)) + [prelude + j for _ in range(n_rec) for j in range(K)] + \
            [prelude + K + c for c in range(coda)]
    else:
        lmap = list(range(L))
    g.add("mor.layer_map", ARR, (I32, lmap))
    if role_map:
        role, m = role_map
        g.add("mor.layer_map." + role, ARR, (I32, m))
    g.add("mor.router.type", STR, router)
    if router != "none":
        g.add("mor.router.arch", STR, arch)
        g.add("mor.router.func", STR, func)
        g.add("mor.router.alpha", F32, alpha)
        g.add("mor.router.temp", F32, 1.0)
        if gating:
            g.add("mor.router.gating", STR, gating)
        g.add("mor.router.capacity", ARR, (F64, [(n_rec - r) / n_rec for r in range(n_rec)]))
        g.add("mor.router.threshold", ARR, (F32, [0.5] * n_rec))
    if kv_shared is not None:
        g.add("mor.kv.shared", BOOL, kv_shared)
    if tokenizer:
        tokenizer(g)
    seed = [1]

    def t(name, dims, ttype=T_F32, **kw):
        seed[0] += 1
        g.tensor(name, dims, ttype, seed=seed[0], **kw)

    t("token_embd.weight", [d, V], wtype, scale=1.0)
    t("output_norm.weight", [d], const=1.0)
    if untied:
        t("output.weight", [d, V], wtype)
    stored = sorted(set(lmap) | (set(role_map[1]) if role_map else set()))
    shapes = {"attn_norm": [d], "attn_q": [d, H * hd], "attn_k": [d, Hkv * hd], "attn_v": [d, Hkv * hd],
              "attn_output": [H * hd, d], "ffn_norm": [d], "ffn_gate": [d, F], "ffn_up": [d, F],
              "ffn_down": [F, d]}
    for b in stored:
        for role in ROLES:
            used = role_map[1] if role_map and role == role_map[0] else lmap
            if b not in used:
                continue
            norm = role.endswith("norm")
            t("blk.%d.%s.weight" % (b, role), shapes[role], T_F32 if norm else wtype,
              **({"const": 1.0} if norm else {}))
    if router == "expert":
        for r in range(n_rec):
            if arch == "linear":
                t("rtr.%d.weight" % r, [d, 1], scale=1.0)
            else:
                t("rtr.%d.fc1.weight" % r, [d, 2 * d], scale=1.0)
                t("rtr.%d.fc2.weight" % r, [2 * d, 1], scale=1.0)
    elif router == "token":
        if arch == "linear":
            t("rtr.weight", [d, n_rec], scale=1.0)
        else:
            t("rtr.fc1.weight", [d, 2 * d], scale=1.0)
            t("rtr.fc2.weight", [2 * d, n_rec], scale=1.0)
        if bias:
            t("rtr.bias", [n_rec], scale=0.1)
    return g.bytes()


# ---------------------------------------------------------------------------
# A byte-level BPE vocabulary: GPT-2's bytes and its first merges
# ---------------------------------------------------------------------------
def gpt2_tokenizer(pre, n_merges=2000):
    tokens = list(testlib.gpt2_byte_chars().values())
    merges = []
    with open(os.path.join(ROOT, "tests", "data", "tokenizer", "gpt2-merges.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#version") or not line:
                continue
            a, b = line.split(" ")
            if a + b in tokens:         # a later merge making the same token: keep the vocab unique
                continue
            merges.append(line)
            tokens.append(a + b)
            if len(merges) == n_merges:
                break
    types = [1] * len(tokens)
    specials = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<custom>", 4)]
    for s, ty in specials:
        tokens.append(s)
        types.append(ty)

    def write(g):
        g.add("tokenizer.ggml.model", STR, "gpt2")
        g.add("tokenizer.ggml.pre", STR, pre)
        g.add("tokenizer.ggml.tokens", ARR, (STR, tokens))
        g.add("tokenizer.ggml.token_type", ARR, (I32, types))
        g.add("tokenizer.ggml.merges", ARR, (STR, merges))
        g.add("tokenizer.ggml.bos_token_id", U32, len(tokens) - 4)
        g.add("tokenizer.ggml.eos_token_id", U32, len(tokens) - 4)
        g.add("tokenizer.ggml.add_bos_token", BOOL, False)
    return write, len(tokens)


def spm_tokenizer(hf_merges=False, n_merges=2000):
    """A SentencePiece-style vocabulary made from GPT-2's first merges whose
    sides are printable ASCII or U+0120 (a space, which becomes U+2581): the
    control tokens, the 256 byte tokens <0xNN>, the ASCII characters, then a
    token per merge. Without hf_merges it merges by score (minus the merge's
    rank) with the dummy prefix; with them by the merges, HF Metaspace split at
    every U+2581, no prefix (Gemma-like)."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    chars = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    for c in chars:
        tokens.append(c)
        types.append(1)
        scores.append(-1.0)
    known = set(tokens)
    merges = []

    def spm(t):
        return t.replace("\u0120", "\u2581")

    with open(os.path.join(ROOT, "tests", "data", "tokenizer", "gpt2-merges.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#version") or not line:
                continue
            a, b = (spm(x) for x in line.split(" "))
            if not all(ch == "\u2581" or 0x21 <= ord(ch) < 0x7F for ch in a + b) or a not in known \
                    or b not in known or a + b in known:
                continue
            merges.append(a + " " + b)
            tokens.append(a + b)
            types.append(1)
            scores.append(-2.0 - len(merges))
            known.add(a + b)
            if len(merges) == n_merges:
                break
    tokens.append("<custom>")
    types.append(4)
    scores.append(0.0)

    def write(g):
        g.add("tokenizer.ggml.model", STR, "llama")
        g.add("tokenizer.ggml.tokens", ARR, (STR, tokens))
        g.add("tokenizer.ggml.token_type", ARR, (I32, types))
        if hf_merges:
            g.add("tokenizer.ggml.pre", STR, "metaspace")
            g.add("tokenizer.ggml.merges", ARR, (STR, merges))
            g.add("mor.tokenizer.prefix_space", STR, "never")
        else:
            g.add("tokenizer.ggml.pre", STR, "default")
            g.add("tokenizer.ggml.scores", ARR, (F32, scores))
        g.add("tokenizer.ggml.bos_token_id", U32, 1)
        g.add("tokenizer.ggml.eos_token_id", U32, 2)
        g.add("tokenizer.ggml.unknown_token_id", U32, 0)
    return write, len(tokens)


def vocab_only(pre, spm=None, nfc=False):
    write, n = spm_tokenizer(spm == "hf") if spm else gpt2_tokenizer(pre)
    g = Gguf()
    g.add("general.architecture", STR, "mor")
    g.add("mor.format_version", U32, 1)
    g.add("mor.vocab_size", U32, n + 8)      # padded, as models often are
    write(g)
    if nfc:                                  # GPT-NeoX's tokenizer.json normalizes to NFC
        g.add("mor.tokenizer.normalizer", STR, "nfc")
    return g.bytes()


# ---------------------------------------------------------------------------
# Checkpoints: safetensors, torch zip, pickle
# ---------------------------------------------------------------------------
def tiny_state_dict():
    """(name, dtype, shape, bytes) of a small Llama-like state dict."""
    out = []
    for name, shape in [("model.embed_tokens.weight", [16, 4]), ("model.norm.weight", [4]),
                        ("model.layers.0.self_attn.q_proj.weight", [4, 4]),
                        ("lm_head.weight", [16, 4])]:
        n = 1
        for s in shape:
            n *= s
        out.append((name, "F32", shape, struct.pack("<%df" % n, *[(i % 7) * 0.125 for i in range(n)])))
    out.append(("model.layers.0.mlp.up_proj.weight", "F16", [2, 4], struct.pack("<8e", *[0.5] * 8)))
    out.append(("model.layers.0.mlp.down_proj.weight", "BF16", [4, 2], b"\x80\x3f" * 8))
    return out


def safetensors_bytes(sd):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dt, shape, blob in sd:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def pickle_bytes(sd):
    """data.pkl as torch.save (protocol 2) writes it, opcode by opcode."""
    storage_cls = {"F32": "FloatStorage", "F16": "HalfStorage", "BF16": "BFloat16Storage"}
    memo = {}
    out = bytearray(b"\x80\x02}q\x00(")
    nxt = [1]

    def put():
        out.extend(b"q" + bytes([nxt[0]]))
        nxt[0] += 1
        return nxt[0] - 1

    def uni(s):
        b = s.encode()
        out.extend(b"X" + struct.pack("<I", len(b)) + b)

    def glob(mod, name):
        key = (mod, name)
        if key in memo:
            out.extend(b"h" + bytes([memo[key]]))
        else:
            out.extend(b"c" + ("%s\n%s\n" % (mod, name)).encode())
            memo[key] = put()

    def integer(v):
        if v < 256:
            out.extend(b"K" + bytes([v]))
        elif v < 65536:
            out.extend(b"M" + struct.pack("<H", v))
        else:
            out.extend(b"J" + struct.pack("<i", v))

    def tup(vals):
        out.extend(b"(")
        for v in vals:
            integer(v)
        out.extend(b"t")

    for i, (name, dt, shape, blob) in enumerate(sd):
        uni(name)
        put()
        glob("torch._utils", "_rebuild_tensor_v2")
        out.extend(b"((")
        uni("storage")
        glob("torch", storage_cls[dt])
        uni(str(i))
        uni("cpu")
        n = 1
        for s in shape:
            n *= s
        integer(n)
        out.extend(b"tQ")          # TUPLE, BINPERSID
        integer(0)
        tup(shape)
        strides, acc = [], 1
        for s in reversed(shape):
            strides.insert(0, acc)
            acc *= s
        tup(strides)
        out.extend(b"\x89")        # NEWFALSE
        glob("collections", "OrderedDict")
        out.extend(b")R")          # EMPTY_TUPLE, REDUCE
        out.extend(b"tR")          # TUPLE, REDUCE
        put()
    out.extend(b"u.")              # SETITEMS, STOP
    return bytes(out)


def torch_zip_bytes(sd):
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w", compression=zipfile.ZIP_STORED) as z:
        def add(name, data):
            zi = zipfile.ZipInfo("tiny/" + name, date_time=(2024, 1, 1, 0, 0, 0))
            z.writestr(zi, data)
        add("data.pkl", pickle_bytes(sd))
        add("byteorder", b"little")
        for i, (_, _, _, blob) in enumerate(sd):
            add("data/%d" % i, blob)
        add("version", b"3\n")
    return bio.getvalue()


# ---------------------------------------------------------------------------
# Text seeds
# ---------------------------------------------------------------------------
TOKENIZER_JSON = {
    "version": "1.0",
    "added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": None, "merges": ["h e", ["l", "l"], "he ll"]},
}


def tokenizer_json(pre_seq):
    tj = json.loads(json.dumps(TOKENIZER_JSON))
    vocab = {"<|endoftext|>": 0}
    for c in testlib.gpt2_byte_chars().values():
        vocab[c] = len(vocab)
    for t in ["he", "ll", "hell"]:
        vocab[t] = len(vocab)
    tj["model"]["vocab"] = vocab
    if pre_seq:
        tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, TOKENIZER_JSON["pre_tokenizer"]]}
    return json.dumps(tj, ensure_ascii=False).encode()


def tokenizer_json_spm(variant):
    """A SentencePiece-style tokenizer.json (BPE with byte_fallback): legacy Llama (Prepend + Replace
    normalizer, TemplateProcessing with <s>) or Metaspace (prepend_scheme first)."""
    sp = "\u2581"
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t in [sp, "h", "e", "l", "o", "he", "ll", "hell", "hello", sp + "hello"]:
        vocab[t] = len(vocab)
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": sp}
    tj = {"version": "1.0",
          "added_tokens": [{"id": i, "content": c, "special": True, "normalized": False}
                           for i, c in enumerate(["<unk>", "<s>", "</s>"])],
          "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": sp}, replace]},
          "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                       {"Sequence": {"id": "A", "type_id": 0}}]},
          "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>", "vocab": vocab,
                    "merges": ["h e", "l l", "he ll", "hell o", sp + " hello"]}}
    if variant == "metaspace":
        tj["normalizer"] = None
        tj["pre_tokenizer"] = {"type": "Metaspace", "replacement": sp, "prepend_scheme": "first", "split": True}
    return json.dumps(tj, ensure_ascii=False).encode()


def decode_seed(model, kvmode, ops):
    """A decode-fuzzer input (the op encoding is described in fuzz_decode.c)."""
    return bytes([model, kvmode, 30, 0x2F]) + bytes(ops)


def add(tok, seq=0, posmode=0):
    return [(posmode << 2) | seq, tok * 2 + 1]      # odd token byte: with logits


DECODE = [0x20]


def http_post(body):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: localhost:8080\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(body)) + body


def sampler_seed(seed=7, temp=83, top_k=40, top_p=242, min_p=26, rep=77, last_n=64, pres=160, freq=141, min_keep=2,
                 typical=180, sigma=96, dyn=102, dyn_exp=64, xtc_p=60, xtc_t=20, miro=0, tau=100, eta=26, dry=160,
                 dry_base=80, allowed=2, dry_n=64, order=(), bias=(), breakers=(), n_vocab=300, hist=()):
    """fuzz_sampler.c's input: the params' bytes as read_params reads them
    (each field one byte on a scale), then bias pairs, breakers, the
    vocabulary's size, one byte per logit (255: -inf) and the history."""
    b = bytearray(struct.pack(">Q", seed))
    b += bytes([temp, top_k, top_p, min_p, rep, last_n, pres, freq, min_keep, typical, sigma, dyn, dyn_exp, xtc_p,
                xtc_t, miro, tau, eta, dry, dry_base, allowed, dry_n, len(order) + 1])
    b += bytes(list(order) + [0] * (16 - len(order)))
    b += bytes([len(bias)]) + bytes(x for pair in bias for x in pair)
    b += bytes([len(breakers)]) + bytes(x for seq in breakers for x in [len(seq) - 1] + list(seq))
    b += struct.pack(">H", n_vocab)
    b += bytes(255 if i % 37 == 5 else (i * 73 + 11) % 200 + 28 for i in range(n_vocab))
    return bytes(b + bytes(hist))


def main():
    models = {
        "plain.gguf": model(V=300, d=8, F=16, K=2, tokenizer=gpt2_tokenizer("gpt2", 36)[0]),
        "plain_f16.gguf": model(V=64, d=8, F=16, K=2, wtype=T_F16, untied=True,
                                role_map=("ffn_up", [0, 0])),
        "plain_bf16.gguf": model(V=64, d=8, F=16, K=1, n_rec=1, wtype=T_BF16),
        "expert_mc.gguf": model(prelude=1, n_rec=3, K=1, coda=1, sharing="middle_cycle", router="expert"),
        "expert_kvshare.gguf": model(prelude=1, n_rec=3, K=1, coda=1, sharing="middle_cycle", router="expert",
                                     arch="mlp", func="tanh", kv_shared=True, gating="additive"),
        "expert_cycle.gguf": model(n_rec=2, K=2, sharing="cycle", router="expert", func="none", alpha=1.0),
        "token_mc.gguf": model(prelude=1, n_rec=3, K=1, coda=1, sharing="middle_cycle", router="token",
                               arch="mlp", func="softmax", alpha=1.0, bias=True),
        "vocab_gpt2.gguf": vocab_only("gpt2"),
        "vocab_smollm.gguf": vocab_only("smollm"),
        "vocab_falcon.gguf": vocab_only("falcon"),
        "vocab_deepseek_coder.gguf": vocab_only("deepseek-coder"),
        "vocab_deepseek_llm.gguf": vocab_only("deepseek-llm"),
        "vocab_mpt.gguf": vocab_only("mpt", nfc=True),
        "vocab_spm.gguf": vocab_only(None, "scores"),
        "vocab_spm_hf.gguf": vocab_only(None, "hf"),
    }
    sd = tiny_state_dict()
    corpus = {
        "gguf": {k: v for k, v in models.items() if not k.startswith("vocab_")},
        "safetensors": {"tiny.safetensors": safetensors_bytes(sd),
                        "empty.safetensors": safetensors_bytes([])},
        "torch_zip": {"tiny.bin": torch_zip_bytes(sd)},
        "pickle": {"tiny.pkl": pickle_bytes(sd), "one.pkl": pickle_bytes(sd[:1])},
        "json": {"config.json": open(os.path.join(
            ROOT, "tests/data/fixtures/expert_mc3_fix_perturbed/hf_safetensors/config.json"), "rb").read(),
                 "mor_config.json": open(os.path.join(
                     ROOT, "tests/data/fixtures/token_mc3_perturbed/mor_config.json"), "rb").read(),
                 "values.json": b'[1, -2.5e-3, "a\\u00e9\\ud83d\\ude00\\n", true, false, null, {"k": {}}, []]'},
        "yaml": {"mor_cfg.yaml": open(os.path.join(
            ROOT, "tests/data/fixtures/expert_mc3_fix_perturbed/mor_cfg.yaml"), "rb").read(),
                 "kv.yaml": open(os.path.join(
                     ROOT, "tests/data/fixtures/expert_mc3_kvshare_fix_perturbed/mor_cfg.yaml"), "rb").read(),
                 "flow.yaml": b"---\na: [1, 2.5, 'x', \"y\\n\"]\nb: {c: ~, d: yes}\nlist:\n- one\n- two: 2\n  three: 3\nplain: a\n  continued\n"},
        "hf_tokenizer": {"gpt2.json": tokenizer_json(False), "smollm.json": tokenizer_json(True),
                         "llama.json": tokenizer_json_spm("legacy"), "metaspace.json": tokenizer_json_spm("metaspace")},
        # the first byte: bits 0-2 the vocabulary (fuzz_vocab.h), 3 PARSE_SPECIAL, 4 ADD_BOS, 5 PARSE_USER_DEFINED
        "tokenize": {"ascii.txt": b"\x00Hello world, it's 2024! I'm   here.\n\tdef f(x): return x**2",
                     "special.txt": b"\x09<|im_start|>user\nhi<|im_end|><custom> <|endoftext|>",
                     "utf8.txt": "\x01Caf\u00e9 \u4f60\u597d\u3002 \U0001F600 \u0661\u0662 na\u00efve".encode()
                     + b" \xff\xc0\x80 bad",
                     "falcon.txt": b"\x02x=12345; y += 'it''s' ... $$ ~ 3.14159!!",
                     "deepseek.txt": "\x23\u6211\u60f3\u5728apple\u5de5\u4f5c 123\r\nHi, \u00bfqu\u00e9? \u3000 <custom>  "
                                     .encode(),
                     "deepseek_llm.txt": "\x04\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \uff01\uff1f\u2018q\u2019 a  \t ".encode(),
                     "mpt.txt": "\x25    indented\n        more  <custom> e\u0301\u0323 \u1100\u1161\u11a8 \u212b".encode(),
                     "spm.txt": "\x06Hello world, it's \u00e9t\u00e9 \U0001F600 \xff".encode("utf-8", "surrogatepass"),
                     "spm_bos.txt": b"\x1eThe <s>quick</s> brown <custom> fox",
                     "spm_hf.txt": b"\x07  two spaces, a\ttab \xc3\xa9 \xff"},
        "detokenize": {"ids.bin": bytes([0]) + struct.pack("<8i", 0, 1, 255, 256, 2000, 2256, 2259, 2263),
                       "small.bin": bytes([1 | 2 << 3]) + struct.pack("<4i", 2259, 2256, 300, 2263),
                       "spm.bin": bytes([6 | 8 << 3]) + struct.pack("<8i", 0, 1, 2, 3, 100, 259, 260, 400),
                       "spm_hf.bin": bytes([7 | 1 << 3]) + struct.pack("<6i", 259, 259, 300, 1000, 0x41 + 3, 2),
                       # e, then the bytes of U+0301: re-tokenized in NFC, the e-acute
                       "mpt_nfc.bin": bytes([5 | 4 << 3]) + struct.pack("<4i", 68, 136, 223, 0)},
        "http": {
            "get.txt": b"\x05GET /health HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\n\r\n",
            "post.txt": b"\x07" + http_post(b'{"prompt": "The jury said", "max_tokens": 4}'),
            "chunked.txt": b"\x09POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                           b"Expect: 100-continue\r\nConnection: close\r\n\r\n5;ext=1\r\n{\"pro\r\n"
                           b"a\r\nmpt\": \"Hi\"}\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "http10.txt": b"\x0b\r\nGET http://localhost/v1/models HTTP/1.0\nConnection: keep-alive\n\n",
        },
        "api": {
            "completion.json": b"\x00" + json.dumps({
                "model": "brown-mor", "prompt": "The jury said that", "max_tokens": 16, "temperature": 0.8,
                "top_p": 0.95, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "jury"], "stream": False,
                "repeat_penalty": 1.1, "repeat_last_n": 64, "user": "u", "n": 1, "echo": False,
                "logprobs": None, "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": {}}).encode(),
            "ids.json": b"\x02" + json.dumps({"prompt": [1, 2, 3], "max_tokens": 4, "stream": True,
                                              "stream_options": {"include_usage": True}}).encode(),
            "llama_sampling.json": b"\x00" + json.dumps({
                "prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -0.2, "logit_bias": [[5, False], ["ab", 2]],
                "typical_p": 0.9, "min_keep": 2, "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2,
                "dry_multiplier": 0.8, "dry_base": 1.5, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
                "dry_sequence_breakers": ["\n", ":"], "xtc_probability": 0.5, "xtc_threshold": 0.1, "top_n_sigma": 1,
                "dynatemp_range": 0.3, "dynatemp_exponent": 1.5, "samplers": ["top_k", "typ-p", "temp"],
                "cache_prompt": False, "n_probs": 2, "ignore_eos": True, "n_keep": -1, "id_slot": 1,
                "return_tokens": True}).encode(),
            "chat.json": b"\x03" + json.dumps({"model": "m", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "stop here"}],
                "stop": ["here", "\n\n"], "max_completion_tokens": 8}).encode(),
        },
        # the first byte: bits 0-1 the format (generic, hermes, llama3, mistral), bit 2 the grammar mode
        # (then bit 3 names the first tool, bit 4 parallel calls), bits 3-7 how the reply is cut (fuzz_tools.c)
        "tools": {
            "hermes.txt": b"\x09Let me check.\n<tool_call>\n" + json.dumps(
                {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}).encode() +
            b"\n</tool_call>\n<tool_call>\n" + json.dumps({"name": "get_time", "arguments": {"tz": "CET"}}).encode() +
            b"\n</tool_call>",
            "hermes_unclosed.txt": b"\x19text <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n",
            "hermes_partial.txt": b"\x21Hello there <tool_ca",
            "llama3.txt": b"\x12<|python_tag|>" + json.dumps({"name": "get_weather", "parameters": {"city": "Paris"}}).encode()
            + b"; " + json.dumps({"name": "get_time", "parameters": {}}).encode(),
            "llama3_plain.txt": b"\x1a " + json.dumps({"name": "f", "parameters": {"x": [1, 2.5, None]}}).encode(),
            "llama3_trailing.txt": b"\x2a{\"name\": \"f\", \"parameters\": {}} and more",
            "mistral.txt": b"\x0bSure. [TOOL_CALLS]" + json.dumps([
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "g", "arguments": json.dumps({"a": 1, "b": "\u00e9"})}]).encode(),
            "mistral_bad.txt": b"\x13[TOOL_CALLS][{\"name\": \"f\", \"arguments\": 5}]",
            "generic.txt": b"\x00" + json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                                                              {"name": "get_time"}]}).encode(),
            "generic_one.txt": b"\x08 " + json.dumps({"tool_call": {"name": "f", "arguments": {"k": {}}}}).encode(),
            "generic_response.txt": b"\x10" + json.dumps({"response": "It is sunny \u2600."}).encode(),
            "generic_text.txt": b"\x18plain text with { braces } and \"quotes\\\" \xff\xfe",
            "grammar_hermes.json": b"\x05" + json.dumps([
                {"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": {
                    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer",
                                                                                         "minimum": 1}},
                    "required": ["city"]}}},
                {"type": "function", "function": {"name": "get_time"}}]).encode(),
            "grammar_named.json": b"\x1f" + json.dumps([
                {"type": "function", "function": {"name": "a.b-c_1", "parameters": {
                    "type": "object", "properties": {"xs": {"type": "array", "items": {"enum": ["x", 1, None]}}}}}},
                {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]).encode(),
            "grammar_llama3.json": b"\x06" + json.dumps([
                {"type": "function", "function": {"name": "f", "parameters": {
                    "type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]{2,4}$"}}}}}]).encode(),
            "grammar_generic.json": b"\x14" + json.dumps([
                {"type": "function", "function": {"name": "f", "parameters": {"$defs": {"n": {"type": "number"}},
                                                                              "type": "object",
                                                                              "properties": {"v": {"$ref": "#/$defs/n"}}}}}]).encode(),
        },
        "sampler": {
            "every_stage.bin": sampler_seed(bias=[(3, 255), (10, 200)], breakers=[(5,), (6, 7)],
                                            hist=[5, 9, 12, 13, 14, 5, 12, 13, 14, 1, 2, 12, 13] * 3),
            "mirostat2.bin": sampler_seed(miro=202, n_vocab=50, hist=[1, 2, 3]),
            "mirostat1.bin": sampler_seed(miro=201, temp=96, n_vocab=120),
            "llama_order.bin": sampler_seed(order=range(1, 10), n_vocab=100, hist=list(range(20)) * 2),
            "greedy.bin": sampler_seed(temp=0, rep=100, bias=[(0, 255), (1, 255)], n_vocab=40, hist=[2, 3, 2, 3, 2]),
        },
        "json_schema": {
            "object.json": json.dumps({
                "type": "object", "title": "person",
                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 40},
                               "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"},
                                                                    "minItems": 1, "maxItems": 4},
                               "kind": {"enum": ["a", "b", 3, None]}, "ok": {"type": ["boolean", "null"]},
                               "x": {"const": {"k": [1, 2.5e-3]}}},
                "required": ["name", "age"], "additionalProperties": {"type": "number"}}).encode(),
            "refs.json": json.dumps({
                "$defs": {"node": {"type": "object", "properties": {
                    "value": {"type": "number"},
                    "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["value"]},
                    "a~b/c": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#"}}]}},
                "definitions": {"x": {"allOf": [{"properties": {"p": {}}}, {"required": ["q"]}]}},
                "anyOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/a~0b~1c"}, {"$ref": "#/definitions/x"}]}).encode(),
            "any.json": b'{"items": {}, "description": "\u00e9t\u00e9 \ud83d\ude00"}',
            "shaped.json": json.dumps({
                "type": "object", "properties": {
                    "code": {"type": "string", "pattern": "^(?:[A-Z]{2}|x\\d+)-[^\\s\"]{1,3}\\.?$"},
                    "word": {"type": "string", "pattern": "ab[c-e\\u00e9]*"},
                    "when": {"type": "string", "format": "date-time"}, "mail": {"type": "string", "format": "email"},
                    "n": {"type": "integer", "minimum": -120, "exclusiveMaximum": 4500},
                    "m": {"type": "integer", "maximum": 7, "exclusiveMaximum": True}},
                "required": ["code", "n"]}).encode(),
        },
        "chat_template": dict(
            [(name + ".jinja", open(os.path.join(ROOT, "tests", "data", "chat_templates", name + ".jinja"), "rb").read())
             for name in CHAT_TEMPLATE_SEEDS] + [("features.jinja", CHAT_TEMPLATE_FEATURES),
                                                 ("own-messages.bin", CHAT_TEMPLATE_OWN_MESSAGES)]),
        "decode": {
            "prefill.bin": decode_seed(1, 0, add(1) + add(2) + add(3, 1) + add(4) + DECODE + add(5) + add(6, 1) + DECODE),
            "seqops.bin": decode_seed(0, 1, add(7) + add(8) + add(9, 1) + DECODE + [0x31, 1, 2, 0] + add(10, 2) +
                                      DECODE + [0x30, 2, 1, 0] + add(11) + DECODE + [0x32, 1, 0, 0] + add(12, 1) + DECODE),
            "token.bin": decode_seed(3, 0, add(1) + add(2) + add(3) + DECODE + [0x50, 2] + add(4) + DECODE),
            "abort.bin": decode_seed(2, 2, add(1) + add(2) + [0x70, 2] + DECODE + [0x70, 0] + DECODE +
                                     [0x40, 3, 2] + add(3) + DECODE),
            "farpos.bin": decode_seed(1, 8, add(1) + add(2, 0, 3) + add(3, 1, 3) + DECODE + add(4) + DECODE),
            "full.bin": decode_seed(4, 1, sum((add(i) for i in range(16)), []) + DECODE +
                                    sum((add(i) for i in range(16)), []) + DECODE + add(1) + DECODE),
        },
    }
    os.makedirs(os.path.join(FUZZ, "models"), exist_ok=True)
    for name, blob in models.items():
        with open(os.path.join(FUZZ, "models", name), "wb") as f:
            f.write(blob)
    for target, files in corpus.items():
        d = os.path.join(FUZZ, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, blob in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(blob)
    print("wrote %d models and %d seeds" % (len(models), sum(len(v) for v in corpus.values())))


if __name__ == "__main__":
    main()
