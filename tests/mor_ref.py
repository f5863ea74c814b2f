"""mor_ref.py - an independent reference forward of MoR models, in plain Python.

Written from shared/research/mor-spec.md, not from libmor's C code, and
checked against the official PyTorch fixtures (test_reference.py) before it
is trusted on configurations no fixture covers (MLP routers, the token-choice
bias, tanh/none router functions, additive gating, temperatures, sequence
sharing, plain Llama, untied output, fp16/bf16 weights).

It reads checkpoints in the official key grammar (HF names) from a
model.safetensors file, computes in float64, and returns logits and depths
for one forward over a token list with the official expert-choice top-k
(or token-choice) routing.

Relaxed (PEFT LoRA) checkpoints: a projection stored as
<proj>.base_layer.weight with <proj>.lora_A.default.weight [r, in] and
<proj>.lora_B.default.weight [out, r] is used as W = base + s * B @ A, s
being mor["lora_scale"] (a number, or {"q_proj": s, ...}), as PEFT computes
it (scale = lora_alpha / r).
"""
import json
import math
import operator
import struct

# ---------------------------------------------------------------- checkpoint

def _f16(h):
    s = -1.0 if h >> 15 else 1.0
    e = (h >> 10) & 31
    m = h & 1023
    if e == 0:
        return s * m * 2.0 ** -24
    if e == 31:
        return s * float("inf") if m == 0 else float("nan")
    return s * (1 + m / 1024.0) * 2.0 ** (e - 15)


def read_safetensors(path):
    """{name: (shape, flat list of floats)}"""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for k, h in hdr.items():
        if k == "__metadata__":
            continue
        a, b = h["data_offsets"]
        blob = raw[base + a:base + b]
        if h["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(blob) // 4), blob))
        elif h["dtype"] == "F16":
            vals = [_f16(x) for x in struct.unpack("<%dH" % (len(blob) // 2), blob)]
        elif h["dtype"] == "BF16":
            vals = [struct.unpack("<f", struct.pack("<I", x << 16))[0]
                    for x in struct.unpack("<%dH" % (len(blob) // 2), blob)]
        else:
            raise ValueError("dtype " + h["dtype"])
        out[k] = (h["shape"], vals)
    return out


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: {name: (shape, flat floats)} -> a safetensors file."""
    hdr, blobs, off = {}, [], 0
    for k in sorted(tensors):
        shape, vals = tensors[k]
        if dtype == "F32":
            blob = struct.pack("<%df" % len(vals), *vals)
        elif dtype == "BF16":
            blob = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in vals)
        elif dtype == "F16":
            blob = struct.pack("<%de" % len(vals), *vals)
        hdr[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def rows(t):
    shape, vals = t
    c = shape[-1]
    return [vals[i * c:(i + 1) * c] for i in range(len(vals) // c)]

# ---------------------------------------------------------------- kernels

def matvec(W, x):
    return [sum(map(operator.mul, w, x)) for w in W]


def rmsnorm(x, w, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [wi * xi * r for wi, xi in zip(w, x)]


def rope(v, n_heads, hd, pos, theta):
    half = hd // 2
    out = list(v)
    for i in range(half):
        ang = pos * (1.0 / theta ** (2 * i / hd))
        c, s = math.cos(ang), math.sin(ang)
        for h in range(n_heads):
            a, b = v[h * hd + i], v[h * hd + i + half]
            out[h * hd + i] = a * c - b * s
            out[h * hd + i + half] = b * c + a * s
    return out


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def silu(x):
    return x / (1.0 + math.exp(-x)) if x > -700 else 0.0


def gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))

# ---------------------------------------------------------------- model

class Model:
    def __init__(self, st_path, config, mor):
        """config: HF config.json dict; mor: dict with type (expert|token|none),
        sharing, num_recursion, capacity, router_type, router_func, alpha, temp,
        gating, kv_sharing."""
        self.t = read_safetensors(st_path)
        self.c = config
        self.m = mor
        c = config
        self.d = c["hidden_size"]
        self.H = c["num_attention_heads"]
        self.Hkv = c["num_key_value_heads"]
        self.hd = c.get("head_dim") or self.d // self.H
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        self.L = c["num_hidden_layers"]
        self.nr = mor.get("num_recursion", 1)
        sh = mor.get("sharing", "none")
        self.P = 1 if sh.startswith("middle") and mor["type"] != "none" else 0
        self.cache = {}

    def W(self, name):
        if name not in self.cache:
            base = name[:-len("weight")] + "base_layer.weight"
            if name not in self.t and base in self.t:
                self.cache[name] = self._relaxed(name[:-len(".weight")])
            else:
                self.cache[name] = rows(self.t[name])
        return self.cache[name]

    def _relaxed(self, module):
        """base + s * B @ A of a PEFT LoRA projection (or base alone without factors)"""
        W = [list(r) for r in rows(self.t[module + ".base_layer.weight"])]
        ka, kb = module + ".lora_A.default.weight", module + ".lora_B.default.weight"
        if ka not in self.t:
            return W
        A, B = rows(self.t[ka]), rows(self.t[kb])
        sc = self.m.get("lora_scale", 1.0)
        if isinstance(sc, dict):
            sc = sc[module.rsplit(".", 1)[-1]]
        for o, brow in enumerate(B):
            for q, bq in enumerate(brow):
                f = sc * bq
                if f:
                    W[o] = [w + f * a for w, a in zip(W[o], A[q])]
        return W

    def v(self, name):
        return self.t[name][1]

    # a Llama decoder layer over the rows (xs, positions); kv: list of (pos, k, v)
    # visible to each query; returns new xs and the rows' (k, v)
    def layer(self, pfx, xs, poss, kv_extra=None, store=True):
        H, Hkv, hd = self.H, self.Hkv, self.hd
        group = H // Hkv
        ns = [rmsnorm(x, self.v(pfx + "input_layernorm.weight"), self.eps) for x in xs]
        qs = [rope(matvec(self.W(pfx + "self_attn.q_proj.weight"), n), H, hd, p, self.theta) for n, p in zip(ns, poss)]
        mine = []
        if store:
            for n, p in zip(ns, poss):
                k = rope(matvec(self.W(pfx + "self_attn.k_proj.weight"), n), Hkv, hd, p, self.theta)
                v = matvec(self.W(pfx + "self_attn.v_proj.weight"), n)
                mine.append((p, k, v))
        keys = kv_extra if kv_extra is not None else mine
        out = []
        for x, q, p in zip(xs, qs, poss):
            vis = [(kp, k, v) for kp, k, v in keys if kp <= p]
            att = []
            for h in range(H):
                g = h // group
                qh = q[h * hd:(h + 1) * hd]
                sc = softmax([sum(map(operator.mul, qh, k[g * hd:(g + 1) * hd])) / math.sqrt(hd) for _, k, _ in vis])
                o = [0.0] * hd
                for w, (_, _, v) in zip(sc, vis):
                    vh = v[g * hd:(g + 1) * hd]
                    for i in range(hd):
                        o[i] += w * vh[i]
                att += o
            hx = [a + b for a, b in zip(x, matvec(self.W(pfx + "self_attn.o_proj.weight"), att))]
            n2 = rmsnorm(hx, self.v(pfx + "post_attention_layernorm.weight"), self.eps)
            gt = matvec(self.W(pfx + "mlp.gate_proj.weight"), n2)
            up = matvec(self.W(pfx + "mlp.up_proj.weight"), n2)
            out.append([a + b for a, b in zip(hx, matvec(self.W(pfx + "mlp.down_proj.weight"), [silu(g) * u for g, u in zip(gt, up)]))])
        return out, mine

    def router(self, pfx, x):
        m = self.m
        x = [v / m.get("temp", 1.0) for v in x]
        if m.get("router_type", "linear") == "mlp":
            hdn = [gelu(v) for v in matvec(self.W(pfx + "router.0.weight"), x)]
            return matvec(self.W(pfx + "router.2.weight"), hdn)
        return matvec(self.W(pfx + "router.weight"), x)

    def func(self, z):
        f = self.m.get("router_func", "sigmoid")
        if f == "sigmoid":
            return 1.0 / (1.0 + math.exp(-z))
        if f == "tanh":
            return math.tanh(z)
        return z

    def forward(self, ids, kv=None, decode_from=None):
        """-> (logits rows, depth per token)

        kv: how the recursions compute keys and values, as the official code does:
          "recursion"  no KV sharing: recursion r's block runs on the tokens
                       active at r, which attend to one another;
          "shared"     KV sharing through its RecursiveDynamicCache (the trained
                       semantics): recursion 0's block runs over every token and
                       caches every token's K/V, even below a first capacity of
                       1 (only the rows it took are updated); deeper recursions
                       compute queries only, against recursion 0's K/V;
          "dense"      KV sharing without that cache (use_cache=False, or HF
                       generate(), which passes its own cache): every
                       recursion's block runs over every token with its own K/V
                       projections, and only the rows the router took are
                       updated (token-choice: a token past its depth enters
                       with the input of its last recursion);
          "shared_r0_selected"  a wrong reading of "shared" (recursion 0
                       caches only the tokens it took), for tests to show that
                       they tell the two apart.
          Default: "shared" if mor["kv_sharing"], else "recursion".
        decode_from: ids[decode_from:] are decoded one per call after a
          prefill of ids[:decode_from], as with a KV cache: top-k over a chunk
          of one token keeps it at every recursion, so each runs them all,
          and the prefill ranks the prompt alone. Logits row i is then that
          call's. Token-choice is causal: the same either way.
        """
        m, P, nr = self.m, self.P, self.nr
        T = len(ids)
        emb = self.W("model.embed_tokens.weight")
        xs = [list(emb[i]) for i in ids]
        pos = list(range(T))
        depth = [0] * T
        typ = m["type"]
        kvm = kv or ("shared" if m.get("kv_sharing") else "recursion")
        T0 = T if decode_from is None else decode_from   # the prefill chunk
        if typ == "none":   # plain or recursive: every unrolled layer, ungated
            for l in range(self.L):
                xs, _ = self.layer("model.layers.%d." % l, xs, pos)
        else:
            K = (self.L - 2 * P) // nr
            if P:
                xs, _ = self.layer("model.layers.0.", xs, pos)
            additive = m.get("gating", "weighted") == "additive"

            def block(r, name, inputs, run):
                """recursion r's K layers over the rows `run` -> {row: output}"""
                ys, ps = [inputs[t] for t in run], [pos[t] for t in run]
                for j in range(K):
                    lp = name(j)
                    if kvm in ("shared", "shared_r0_selected") and r > 0:
                        ys, _ = self.layer(lp, ys, ps, kv_extra=r0kv[j], store=False)
                    else:
                        ys, mine = self.layer(lp, ys, ps)
                        if r == 0:
                            r0kv[j] = mine
                return dict(zip(run, ys))

            def every_row(r):   # does recursion r run every token (for its K/V)?
                return kvm == "dense" or (kvm == "shared" and r == 0)

            r0kv = {}
            if typ == "expert":
                cand = list(range(T))
                for r in range(nr):
                    pfx = "model.layers.%d." % (P + r)
                    g = {t: (self.func(self.router(pfx + "mor_router.", xs[t])[0])) for t in cand}
                    p = {t: (g[t] if m.get("router_func") == "none" else m["alpha"] * g[t]) for t in cand}
                    k = max(1, int(m["capacity"][r] * T0))
                    sel = sorted(sorted([t for t in cand if t < T0], key=lambda t: (-p[t], t))[:k] +
                                 [t for t in cand if t >= T0])
                    out = block(r, lambda j: pfx + "block.%d." % j, xs, list(range(T)) if every_row(r) else sel)
                    for t in sel:
                        w = 1.0 if additive else p[t]
                        xs[t] = [a + w * b for a, b in zip(xs[t], out[t])]
                        depth[t] = r + 1
                    cand = sel
            else:   # token-choice
                pfx = "model.layers.%d." % P
                probs, choice = [], []
                for t in range(T):
                    z = self.router(pfx + "mor_router.", xs[t])
                    pr = [m["alpha"] * v for v in softmax(z)] if m.get("router_func") == "softmax" else \
                         [m["alpha"] * self.func(v) for v in z]
                    bias = self.v(pfx + "router_bias") if (pfx + "router_bias") in self.t else [0.0] * nr
                    q = [a + b for a, b in zip(pr, bias)]
                    i = max(range(nr), key=lambda j: (q[j], -j))
                    probs.append(pr[i])
                    choice.append(i)
                    depth[t] = i + 1
                cur = [list(x) for x in xs]
                for r in range(nr):
                    act = [t for t in range(T) if choice[t] >= r]
                    out = block(r, lambda j: pfx + "block_list.%d.%d." % (r, j), cur,
                                list(range(T)) if every_row(r) else act)
                    for t in act:
                        if choice[t] == r:
                            w = 1.0 if additive else probs[t]
                            xs[t] = [a + w * b for a, b in zip(xs[t], out[t])]
                        else:
                            cur[t] = out[t]
            if P:
                last = P + (nr if typ == "expert" else 1)
                xs, _ = self.layer("model.layers.%d." % last, xs, pos)
        xs = [rmsnorm(x, self.v("model.norm.weight"), self.eps) for x in xs]
        head = self.W("lm_head.weight") if "lm_head.weight" in self.t else emb
        return [matvec(head, x) for x in xs], depth

    def greedy(self, prompt, n, kv=None, cached=True):
        """n greedy tokens after prompt: (tokens, the logits each was picked
        from, the top-1 minus top-2 margin of each). cached: the prompt, then
        one token per call (decode_from); else the whole sequence recomputed
        at every step (the official no-cache loop)."""
        seq, toks, steps, margins = list(prompt), [], [], []
        for _ in range(n):
            logits, _ = self.forward(seq, kv, decode_from=len(prompt) if cached else None)
            row = logits[-1]
            best = max(range(len(row)), key=lambda v: (row[v], -v))
            margins.append(row[best] - max(x for v, x in enumerate(row) if v != best))
            toks.append(best)
            steps.append(row)
            seq.append(best)
        return toks, steps, margins
