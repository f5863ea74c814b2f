"""family_ref.py - a float64 reference forward of the model families libmor
runs beyond MoR-Llama, in plain Python, written from the Hugging Face
modelling code (transformers' modeling_llama, modeling_gemma,
modeling_gemma2, modeling_gpt_neox), not from libmor's C code.

It reads a Hugging Face checkpoint directory (config.json, model.safetensors)
in each family's own key names (gpt_neox.layers.N.attention.query_key_value,
Gemma's raw norm weights w that the model multiplies by 1 + w, ...) and
returns the logits of one forward over a list of token ids:

  Llama      RMSNorm w * x_hat, RoPE rotate_half, GQA, SwiGLU
  Gemma      embeddings * sqrt(hidden_size), RMSNorm (1 + w) * x_hat,
             GeGLU with gelu_pytorch_tanh, head_dim from the config, tied output
  Gemma 2    Gemma, plus post-attention / pre- and post-feed-forward norms,
             scores * query_pre_attn_scalar^-0.5, attention and final logit
             soft-capping (c * tanh(x / c)), sliding-window attention on the
             layers layer_types (or every other layer, from the first) says
  Ouro       (OuroForCausalLM, vLLM's models/ouro.py) the L layers run
             total_ut_steps times, each sandwich-normed: h = x +
             input_layernorm_2(attn(input_layernorm(x))), out = h +
             post_attention_layernorm_2(mlp(post_attention_layernorm(h)));
             after every loop the stream becomes model.norm of it, the
             logits are lm_head of that; forward_ouro also returns the exit
             gate's probability sigmoid(early_exit_gate(stream)) per loop
  GPT-NeoX   LayerNorm with bias, fused query_key_value whose rows are per
             head [q; k; v], partial rotary (the first int(head_dim *
             rotary_pct) dims of each head, rotate_half over those),
             attention and MLP biases, exact GELU, parallel residual
             (use_parallel_residual) or sequential, untied embed_out

off: a set of feature names to compute *wrongly* on purpose, so that tests
can show that each feature moves the logits by far more than the tolerance
(a model that passes with a feature off would not test it):
  "embed_scale", "norm_offset", "post_norms", "attn_softcap",
  "final_softcap", "window", "query_scalar", "partial_rotary" (rotate the
  whole head), "rope_layout" (pairs (2i, 2i+1) as GGML's normal RoPE
  instead of rotate_half), "qkv_layout" (read query_key_value as [all q;
  all k; all v]), "parallel_residual" (sequential instead), "gelu_tanh"
  (exact GELU instead of the tanh one, or the reverse), "layer_norm_bias".
and one to compute as llama.cpp's CPU backend does, to measure what part
of libmor's difference to llama.cpp comes from it:
  "ggml_gelu"  GELU as ggml's F16 table: the input rounded to F16, the tanh
               GELU of that rounded to F16 (|x| >= 10: 0 or x).

Also the random test models of each family (make_model), deterministic for
a seed, used by tests/test_families.py and tests/peer/ (which writes the
same weights as a llama.cpp GGUF with llama.cpp's gguf-py).

    python3 tests/family_ref.py write FAMILY DIR        a model's checkpoint
    python3 tests/family_ref.py logits DIR 1,2,3 [OFF]  its logits, one row per line
"""
import json
import math
import operator
import os
import random
import struct
import sys

import mor_ref

FAMILIES = ("llama", "gemma", "gemma2", "gptneox")

# ---------------------------------------------------------------- maths

def matvec(W, x):
    return [sum(map(operator.mul, w, x)) for w in W]


def add(a, b):
    return [x + y for x, y in zip(a, b)]


def rms_hat(x, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * r for v in x]


def layer_norm(x, w, b, eps):
    n = len(x)
    mu = sum(x) / n
    var = sum((v - mu) ** 2 for v in x) / n
    r = 1.0 / math.sqrt(var + eps)
    return [(v - mu) * r * wi + bi for v, wi, bi in zip(x, w, b)]


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def silu(x):
    return x / (1.0 + math.exp(-x)) if x > -700 else 0.0


def gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def ggml_gelu(x):
    """ggml's CPU GELU (GGML_GELU_FP16): a table of F16 tanh-GELU values indexed by the F16 input."""
    if x <= -10.0:
        return 0.0
    if x >= 10.0:
        return x
    h = _f16(x)
    c = _f32(0.7978845608028654)
    v = _f32(0.5 * h * (1.0 + math.tanh(_f32(c * h * (1.0 + _f32(0.044715) * h * h)))))
    return _f16(v)


def rope(v, n_heads, hd, rot, pos, theta, layout="half"):
    """RoPE on the first rot dims of each of n_heads heads of hd values:
    rotate_half pairs (i, i + rot/2) (HF), or "pairs": (2i, 2i + 1) (GGML normal)."""
    half = rot // 2
    out = list(v)
    for i in range(half):
        ang = pos * (1.0 / theta ** (2 * i / rot))
        c, s = math.cos(ang), math.sin(ang)
        for h in range(n_heads):
            a_i, b_i = (h * hd + i, h * hd + i + half) if layout == "half" else (h * hd + 2 * i, h * hd + 2 * i + 1)
            a, b = v[a_i], v[b_i]
            out[a_i] = a * c - b * s
            out[b_i] = b * c + a * s
    return out


def act_fn(name, off):
    if "ggml_gelu" in off and name in ("gelu", "gelu_pytorch_tanh", "gelu_new"):
        return ggml_gelu
    if name == "silu":
        return silu
    if name == "gelu":
        return gelu_tanh if "gelu_tanh" in off else gelu
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return gelu if "gelu_tanh" in off else gelu_tanh
    raise ValueError("activation " + name)

# ---------------------------------------------------------------- model

def family_of(cfg):
    arch = (cfg.get("architectures") or [""])[0]
    return {"LlamaForCausalLM": "llama", "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
            "GPTNeoXForCausalLM": "gptneox", "NanbeigeForCausalLM": "llama", "OuroForCausalLM": "ouro"}[arch]


class Ref:
    def __init__(self, d, off=()):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        self.t = mor_ref.read_safetensors(os.path.join(d, "model.safetensors"))
        self.fam = family_of(self.c)
        self.off = set(off)
        self.rows = {}

    def W(self, k):
        if k not in self.rows:
            self.rows[k] = mor_ref.rows(self.t[k])
        return self.rows[k]

    def v(self, k):
        return self.t[k][1]

    def forward(self, ids):
        return {"llama": self._llama_like, "gemma": self._llama_like, "gemma2": self._llama_like,
                "gptneox": self._neox, "ouro": lambda i: self.forward_ouro(i)[0]}[self.fam](ids)

    # Llama, Gemma, Gemma 2: one decoder code with the Gemma features switched by family
    def _llama_like(self, ids):
        c, off, fam = self.c, self.off, self.fam
        gem = fam in ("gemma", "gemma2")
        g2 = fam == "gemma2"
        d, H = c["hidden_size"], c["num_attention_heads"]
        Hkv = c.get("num_key_value_heads") or H
        hd = c.get("head_dim") or (256 if gem else d // H)
        eps = c.get("rms_norm_eps", 1e-6)
        theta = c.get("rope_theta", 10000.0)
        L = c["num_hidden_layers"]
        act = act_fn(c.get("hidden_activation") or "gelu_pytorch_tanh" if gem else c.get("hidden_act", "silu"), off)
        group = H // Hkv
        scale = 1.0 / math.sqrt(hd)
        if g2 and "query_scalar" not in off:
            scale = c.get("query_pre_attn_scalar", 256) ** -0.5
        acap = c.get("attn_logit_softcapping", 50.0) if g2 and "attn_softcap" not in off else None
        fcap = c.get("final_logit_softcapping", 30.0) if g2 and "final_softcap" not in off else None
        window = c.get("sliding_window", 4096) if g2 and "window" not in off else None
        types = c.get("layer_types") or ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(L)]
        layout = "pairs" if "rope_layout" in off else "half"

        def norm(x, key):
            w = self.v(key)
            if gem and "norm_offset" not in off:
                w = [1.0 + v for v in w]
            return [a * b for a, b in zip(rms_hat(x, eps), w)]

        emb = self.W("model.embed_tokens.weight")
        xs = [list(emb[i]) for i in ids]
        if gem and "embed_scale" not in off:
            xs = [[v * math.sqrt(d) for v in x] for x in xs]
        T = len(ids)
        # a looped model (NanbeigeForCausalLM): the L layers num_loops times, the
        # final norm between loops unless skip_loop_final_norm (llama.cpp's nanbeige.cpp)
        loops = c.get("num_loops", 1)
        loop_norm = not c.get("skip_loop_final_norm", False) and "loop_norm" not in off
        for l in range(L * loops):
            if l and l % L == 0 and loop_norm:
                xs = [norm(x, "model.norm.weight") for x in xs]
            p = "model.layers.%d." % (l % L)
            local = g2 and window and types[l] == "sliding_attention"
            ns = [norm(x, p + "input_layernorm.weight") for x in xs]
            qs = [rope(matvec(self.W(p + "self_attn.q_proj.weight"), n), H, hd, hd, t, theta, layout) for t, n in enumerate(ns)]
            ks = [rope(matvec(self.W(p + "self_attn.k_proj.weight"), n), Hkv, hd, hd, t, theta, layout) for t, n in enumerate(ns)]
            vs = [matvec(self.W(p + "self_attn.v_proj.weight"), n) for n in ns]
            out = []
            for t in range(T):
                vis = [u for u in range(t + 1) if not local or t - u < window]
                att = []
                for h in range(H):
                    g = h // group
                    qh = qs[t][h * hd:(h + 1) * hd]
                    sc = [sum(map(operator.mul, qh, ks[u][g * hd:(g + 1) * hd])) * scale for u in vis]
                    if acap:
                        sc = [acap * math.tanh(s / acap) for s in sc]
                    pr = softmax(sc)
                    o = [0.0] * hd
                    for w_, u in zip(pr, vis):
                        for i in range(hd):
                            o[i] += w_ * vs[u][g * hd + i]
                    att += o
                a = matvec(self.W(p + "self_attn.o_proj.weight"), att)
                if g2 and "post_norms" not in off:
                    a = norm(a, p + "post_attention_layernorm.weight")
                hx = add(xs[t], a)
                n2 = norm(hx, p + ("pre_feedforward_layernorm.weight" if g2 else "post_attention_layernorm.weight"))
                gt = matvec(self.W(p + "mlp.gate_proj.weight"), n2)
                up = matvec(self.W(p + "mlp.up_proj.weight"), n2)
                m = matvec(self.W(p + "mlp.down_proj.weight"), [act(a_) * b_ for a_, b_ in zip(gt, up)])
                if g2 and "post_norms" not in off:
                    m = norm(m, p + "post_feedforward_layernorm.weight")
                out.append(add(hx, m))
            xs = out
        xs = [norm(x, "model.norm.weight") for x in xs]
        head = self.W("lm_head.weight") if "lm_head.weight" in self.t and not gem else emb
        logits = [matvec(head, x) for x in xs]
        if fcap:
            logits = [[fcap * math.tanh(v / fcap) for v in r] for r in logits]
        return logits

    def forward_ouro(self, ids, loops=None, q=None):
        """(logits, gates) of an Ouro model stopped after `loops` loops (all by
        default): gates[r][t] is token t's exit probability after loop r.
        With q, Ouro's learned exit (the Q-exit) as well, returning (logits,
        gates, depths, cdfs): token t stops after the first loop r < N where
        cdfs[r][t] = 1 - prod_{j<=r} (1 - gates[j][t]) >= q (q < 1), and its
        logits are those of its state then; a stopped token leaves no keys
        and values in the deeper loops (recursion-wise KV: the tokens after
        it do not see it there), and gates/cdfs of loops it did not run are
        None."""
        c = self.c
        d, H = c["hidden_size"], c["num_attention_heads"]
        Hkv = c.get("num_key_value_heads") or H
        hd = c.get("head_dim") or d // H
        eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
        L, group, scale = c["num_hidden_layers"], H // Hkv, 1.0 / math.sqrt(hd)

        def norm(x, key):
            return [a * b for a, b in zip(rms_hat(x, eps), self.v(key))]

        def attn(p, ns, pos):
            qs = [rope(matvec(self.W(p + "self_attn.q_proj.weight"), n), H, hd, hd, t, theta) for t, n in zip(pos, ns)]
            ks = [rope(matvec(self.W(p + "self_attn.k_proj.weight"), n), Hkv, hd, hd, t, theta) for t, n in zip(pos, ns)]
            vs = [matvec(self.W(p + "self_attn.v_proj.weight"), n) for n in ns]
            out = []
            for t in range(len(ns)):   # the running tokens only: each sees those before it
                att = []
                for h in range(H):
                    g = h // group
                    qh = qs[t][h * hd:(h + 1) * hd]
                    pr = softmax([sum(map(operator.mul, qh, ks[u][g * hd:(g + 1) * hd])) * scale for u in range(t + 1)])
                    att += [sum(pr[u] * vs[u][g * hd + i] for u in range(t + 1)) for i in range(hd)]
                out.append(matvec(self.W(p + "self_attn.o_proj.weight"), att))
            return out

        def mlp(p, x):
            gt = matvec(self.W(p + "mlp.gate_proj.weight"), x)
            up = matvec(self.W(p + "mlp.up_proj.weight"), x)
            return matvec(self.W(p + "mlp.down_proj.weight"), [silu(a) * b for a, b in zip(gt, up)])

        emb = self.W("model.embed_tokens.weight")
        xs = [list(emb[i]) for i in ids]
        gw, gb = self.v("model.early_exit_gate.weight"), self.v("model.early_exit_gate.bias")[0]
        gates, cdfs, n = [], [], loops or c.get("total_ut_steps", 4)
        depths, surv = [None] * len(ids), [1.0] * len(ids)
        for r in range(n):
            pos = [t for t in range(len(ids)) if depths[t] is None]
            ys = [xs[t] for t in pos]
            for l in range(L):
                p = "model.layers.%d." % l
                a = attn(p, [norm(x, p + "input_layernorm.weight") for x in ys], pos)
                hs = [add(x, norm(y, p + "input_layernorm_2.weight")) for x, y in zip(ys, a)]
                ys = [add(h, norm(mlp(p, norm(h, p + "post_attention_layernorm.weight")), p + "post_attention_layernorm_2.weight"))
                      for h in hs]
            g, cd = [None] * len(ids), [None] * len(ids)
            for t, y in zip(pos, ys):
                xs[t] = norm(y, "model.norm.weight")
                g[t] = 1.0 / (1.0 + math.exp(-(sum(map(operator.mul, gw, xs[t])) + gb)))
                surv[t] *= 1.0 - g[t]
                cd[t] = 1.0 - surv[t]
                if q is not None and r < n - 1 and q < 1 and cd[t] >= q:
                    depths[t] = r + 1
            gates.append(g)
            cdfs.append(cd)
        head = self.W("lm_head.weight") if "lm_head.weight" in self.t else emb
        logits = [matvec(head, x) for x in xs]
        if q is None:
            return logits, gates
        return logits, gates, [n if d is None else d for d in depths], cdfs

    def _neox(self, ids):
        c, off = self.c, self.off
        d, H = c["hidden_size"], c["num_attention_heads"]
        hd = d // H
        eps = c.get("layer_norm_eps", 1e-5)
        theta = c.get("rotary_emb_base", c.get("rope_theta", 10000.0))
        rot = int(hd * c.get("rotary_pct", 0.25))
        if "partial_rotary" in off:
            rot = hd
        parallel = c.get("use_parallel_residual", True) and "parallel_residual" not in off
        act = act_fn(c.get("hidden_act", "gelu"), off)
        layout = "pairs" if "rope_layout" in off else "half"

        def ln(x, key):
            b = self.v(key + ".bias") if "layer_norm_bias" not in off else [0.0] * d
            return layer_norm(x, self.v(key + ".weight"), b, eps)

        def lin(key, x):
            return add(matvec(self.W(key + ".weight"), x), self.v(key + ".bias"))

        emb = self.W("gpt_neox.embed_in.weight")
        xs = [list(emb[i]) for i in ids]
        T = len(ids)
        for l in range(c["num_hidden_layers"]):
            p = "gpt_neox.layers.%d." % l
            qkv = [lin(p + "attention.query_key_value", ln(x, p + "input_layernorm")) for x in xs]
            qs, ks, vs = [], [], []
            for t, r in enumerate(qkv):
                if "qkv_layout" in off:   # [all q; all k; all v]
                    q, k, v = r[:d], r[d:2 * d], r[2 * d:]
                else:                     # per head [q; k; v] (GPTNeoXAttention's view)
                    q, k, v = [], [], []
                    for h in range(H):
                        base = 3 * h * hd
                        q += r[base:base + hd]
                        k += r[base + hd:base + 2 * hd]
                        v += r[base + 2 * hd:base + 3 * hd]
                qs.append(rope(q, H, hd, rot, t, theta, layout))
                ks.append(rope(k, H, hd, rot, t, theta, layout))
                vs.append(v)
            out = []
            for t in range(T):
                att = []
                for h in range(H):
                    sc = [sum(map(operator.mul, qs[t][h * hd:(h + 1) * hd], ks[u][h * hd:(h + 1) * hd])) / math.sqrt(hd)
                          for u in range(t + 1)]
                    pr = softmax(sc)
                    o = [0.0] * hd
                    for w_, u in zip(pr, range(t + 1)):
                        for i in range(hd):
                            o[i] += w_ * vs[u][h * hd + i]
                    att += o
                a = lin(p + "attention.dense", att)

                def mlp(x):
                    return lin(p + "mlp.dense_4h_to_h", [act(u) for u in lin(p + "mlp.dense_h_to_4h", ln(x, p + "post_attention_layernorm"))])
                if parallel:
                    out.append(add(add(mlp(xs[t]), a), xs[t]))
                else:
                    hx = add(xs[t], a)
                    out.append(add(hx, mlp(hx)))
            xs = out
        xs = [layer_norm(x, self.v("gpt_neox.final_layer_norm.weight"), self.v("gpt_neox.final_layer_norm.bias"), eps)
              for x in xs]
        head = self.W("embed_out.weight")
        return [matvec(head, x) for x in xs]

# ---------------------------------------------------------------- test models

# The test models: small, but with every feature of the family active and
# large enough to matter (tests/test_families.py shows each does).
SHAPES = {
    # TinyLlama's kind: GQA
    "llama": dict(d=64, H=4, Hkv=2, hd=16, F=128, L=2, V=128),
    # head_dim (48) independent of hidden_size / heads (32), one KV head (as Gemma 2B)
    "gemma": dict(d=64, H=2, Hkv=1, hd=48, F=128, L=2, V=128),
    # 3 layers: local, global, local; a window of 3 over 8 tokens
    "gemma2": dict(d=64, H=4, Hkv=2, hd=32, F=128, L=3, V=128),
    # rotary_pct 0.5 of head_dim 16
    "gptneox": dict(d=64, H=4, Hkv=4, hd=16, F=128, L=2, V=128),
    # Ouro: GQA, 2 layers looped total_ut_steps (3) times
    "ouro": dict(d=64, H=4, Hkv=2, hd=16, F=128, L=2, V=128),
}
# the llama model with every matrix 256 wide or a multiple (k-quant super-blocks
# of 256): llama.cpp quantizes it to real k-quants (tests/peer/run.sh)
K256 = dict(d=256, H=4, Hkv=2, hd=64, F=512, L=1, V=256)
IDS = [1, 17, 42, 99, 5, 63, 120, 7]
# llama.cpp's looped Llama (architecture nanbeige), tests/peer/make_nanbeige.py:
# the llama model's weights as files named nanbeige-<name>.lcpp.gguf, each
# (num_loops, skip_loop_final_norm, tied output); n1 and n2t are the depths
# that FORCED routing of n2 / n3t stops at
NANBEIGE = {"n2": (2, False, False), "n2s": (2, True, False), "n3t": (3, False, True), "n3st": (3, True, True),
            "n1": (1, False, False), "n2t": (2, False, True)}


def _mat(rng, r, c, s):
    return ([r, c], [rng.gauss(0, s) for _ in range(r * c)])


def _vec(rng, n, mean, s):
    return ([n], [mean + rng.gauss(0, s) for _ in range(n)])


def make_model(family, seed=1, ffn_out=0.015, head=1.0, **over):
    """(config.json dict, {HF name: (shape, values)}) of a random model. The
    values are rounded to float32 (what the files store). ffn_out: the scale
    of the FFN's output projection; small by default, so that llama.cpp's F16
    GELU table moves the logits by less than 1e-3 (the GELU variant then
    matters less: tests show it with a larger one). head: a factor on the
    output matrix (the embedding where tied), which scales the logits."""
    rng = random.Random("%s-%d" % (family, seed))
    sh = dict(SHAPES[family])
    sh.update({k: v for k, v in over.items() if k in sh})
    d, H, Hkv, hd, F, L, V = (sh[k] for k in ("d", "H", "Hkv", "hd", "F", "L", "V"))
    w = {}
    if family == "gptneox":
        cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": d,
               "intermediate_size": F, "num_attention_heads": H, "num_hidden_layers": L, "vocab_size": V,
               "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "rotary_pct": 0.5, "rotary_emb_base": 10000,
               "use_parallel_residual": True, "hidden_act": "gelu", "tie_word_embeddings": False,
               "attention_bias": True}
        cfg.update({k: v for k, v in over.items() if k in cfg})
        w["gpt_neox.embed_in.weight"] = _mat(rng, V, d, 1.0)
        w["embed_out.weight"] = _mat(rng, V, d, 0.3 * head)
        w["gpt_neox.final_layer_norm.weight"] = _vec(rng, d, 1.0, 0.2)
        w["gpt_neox.final_layer_norm.bias"] = _vec(rng, d, 0.0, 0.2)
        for l in range(L):
            p = "gpt_neox.layers.%d." % l
            for n in ("input_layernorm", "post_attention_layernorm"):
                w[p + n + ".weight"] = _vec(rng, d, 1.0, 0.2)
                w[p + n + ".bias"] = _vec(rng, d, 0.0, 0.2)
            w[p + "attention.query_key_value.weight"] = _mat(rng, 3 * d, d, 0.3)
            w[p + "attention.query_key_value.bias"] = _vec(rng, 3 * d, 0.0, 0.3)
            w[p + "attention.dense.weight"] = _mat(rng, d, d, 0.15)
            w[p + "attention.dense.bias"] = _vec(rng, d, 0.0, 0.1)
            w[p + "mlp.dense_h_to_4h.weight"] = _mat(rng, F, d, 0.2)
            w[p + "mlp.dense_h_to_4h.bias"] = _vec(rng, F, 0.0, 0.3)
            w[p + "mlp.dense_4h_to_h.weight"] = _mat(rng, d, F, ffn_out)
            w[p + "mlp.dense_4h_to_h.bias"] = _vec(rng, d, 0.0, 0.1)
            w[p + "attention.rotary_emb.inv_freq"] = ([hd // 4], [1.0 / 10000 ** (2 * i / (hd // 2)) for i in range(hd // 4)])
    else:
        gem = family in ("gemma", "gemma2")
        cls = {"llama": "LlamaForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
               "ouro": "OuroForCausalLM"}[family]
        cfg = {"architectures": [cls], "model_type": family, "hidden_size": d, "intermediate_size": F,
               "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": hd, "num_hidden_layers": L,
               "vocab_size": V, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
               "tie_word_embeddings": gem}
        if not gem:
            cfg.update(hidden_act="silu", rms_norm_eps=1e-5)
        else:
            cfg.update(hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh")
        if family == "ouro":
            cfg.update(total_ut_steps=3)
        if family == "gemma2":
            cfg.update(query_pre_attn_scalar=hd, attn_logit_softcapping=4.0, final_logit_softcapping=6.0,
                       sliding_window=3)
        cfg.update({k: v for k, v in over.items() if k in cfg or k in ("query_pre_attn_scalar", "layer_types",
                                                                          "total_ut_steps")})
        # Gemma's norm weights are the w of (1 + w): around 0
        nmean = 0.0 if gem else 1.0
        w["model.embed_tokens.weight"] = _mat(rng, V, d, (0.15 if gem else 1.0) * head)
        w["model.norm.weight"] = _vec(rng, d, nmean, 0.2)
        if not gem:
            w["lm_head.weight"] = _mat(rng, V, d, 0.3)
        if family == "ouro":
            w["model.early_exit_gate.weight"] = _mat(rng, 1, d, 0.3)
            w["model.early_exit_gate.bias"] = _vec(rng, 1, 0.0, 0.5)
        norms = ["input_layernorm", "post_attention_layernorm"]
        if family == "gemma2":
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        if family == "ouro":
            norms += ["input_layernorm_2", "post_attention_layernorm_2"]
        for l in range(L):
            p = "model.layers.%d." % l
            for n in norms:
                # Gemma 2's FFN output is normed: 1 + w ~ 0.1 keeps its part (and that of
                # llama.cpp's F16 GELU) small, as ffn_out does for the others
                if n == "post_feedforward_layernorm":
                    w[p + n + ".weight"] = _vec(rng, d, ffn_out * 5 - 1.0, ffn_out * 2)
                else:
                    w[p + n + ".weight"] = _vec(rng, d, nmean, 0.2)
            w[p + "self_attn.q_proj.weight"] = _mat(rng, H * hd, d, 0.25)
            w[p + "self_attn.k_proj.weight"] = _mat(rng, Hkv * hd, d, 0.25)
            w[p + "self_attn.v_proj.weight"] = _mat(rng, Hkv * hd, d, 0.25)
            w[p + "self_attn.o_proj.weight"] = _mat(rng, d, H * hd, 0.15)
            w[p + "mlp.gate_proj.weight"] = _mat(rng, F, d, 0.2)
            w[p + "mlp.up_proj.weight"] = _mat(rng, F, d, 0.2)
            w[p + "mlp.down_proj.weight"] = _mat(rng, d, F, ffn_out if gem else 0.1)
    w = {k: (s, [_f32(x) for x in v]) for k, (s, v) in w.items()}
    return cfg, w


def write_model(d, cfg, w):
    os.makedirs(d, exist_ok=True)
    mor_ref.write_safetensors(os.path.join(d, "model.safetensors"), w)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return d


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "write":
        cfg, w = make_model(sys.argv[2])
        write_model(sys.argv[3], cfg, w)
    elif len(sys.argv) >= 4 and sys.argv[1] == "logits":
        off = sys.argv[4].split(",") if len(sys.argv) > 4 else ()
        for row in Ref(sys.argv[2], off).forward([int(x) for x in sys.argv[3].split(",")]):
            print(" ".join("%.9g" % v for v in row))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
