"""make-ouro-bench.py - a random-weight Hugging Face checkpoint of Ouro's
published shape (OuroForCausalLM), for measuring the learned exit at the
size users run (issue 41): Ouro-1.4B's config.json (hidden 2048, 24 layers
looped total_ut_steps = 4 times, 16 heads of 128 with 16 K/V heads, FFN
5632, vocab 49152, RoPE theta 1e6, untied), its weights seeded random
numbers in BF16 (half the bytes of F32; libmor converts and quantizes them).

    /usr/bin/python3 scripts/make-ouro-bench.py OUT_DIR [--layers 24] [--loops 4] [--seed 1]
    bin/mor-convert OUT_DIR -o ouro.f32.gguf
    bin/mor-quantize ouro.f32.gguf ouro.q8_0.gguf q8_0

The exit gate is scaled so that its logit on the loop-normed stream is about
N(0, 1): the exit probabilities spread over (0, 1), and the threshold q of
`--exit learned:q` sets the mean depth. Speed only: the text is noise.
Needs numpy (Debian python3-numpy); not part of the build. Exits non-zero,
leaving no checkpoint, on any error.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def config(layers, loops):
    return {"architectures": ["OuroForCausalLM"], "model_type": "ouro", "hidden_size": 2048,
            "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 128,
            "num_hidden_layers": layers, "vocab_size": 49152, "max_position_embeddings": 65536,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": False,
            "total_ut_steps": loops, "early_exit_threshold": 1.0, "bos_token_id": 1, "eos_token_id": 2}


def tensors(cfg):
    """(name, shape, scale, mean) of every weight, in file order."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    out = [("model.embed_tokens.weight", (v, d), 1.0, 0.0), ("model.norm.weight", (d,), 0.1, 1.0),
           ("lm_head.weight", (v, d), d ** -0.5, 0.0),
           ("model.early_exit_gate.weight", (1, d), d ** -0.5, 0.0), ("model.early_exit_gate.bias", (1,), 0.0, 0.0)]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        for n in ("input_layernorm", "input_layernorm_2", "post_attention_layernorm", "post_attention_layernorm_2"):
            out.append((p + n + ".weight", (d,), 0.1, 1.0))
        out += [(p + "self_attn.q_proj.weight", (q, d), d ** -0.5, 0.0),
                (p + "self_attn.k_proj.weight", (kv, d), d ** -0.5, 0.0),
                (p + "self_attn.v_proj.weight", (kv, d), d ** -0.5, 0.0),
                (p + "self_attn.o_proj.weight", (d, q), q ** -0.5, 0.0),
                (p + "mlp.gate_proj.weight", (f, d), d ** -0.5, 0.0),
                (p + "mlp.up_proj.weight", (f, d), d ** -0.5, 0.0),
                (p + "mlp.down_proj.weight", (d, f), f ** -0.5, 0.0)]
    return out


def bf16(x):
    """float32 -> bfloat16 bits, rounded to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write(out_dir, cfg, seed):
    specs = tensors(cfg)
    header, off = {}, 0
    for name, shape, _, _ in specs:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.default_rng(seed)
    tmp = os.path.join(out_dir, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape, scale, mean in specs:
            rows = shape[0] if len(shape) == 2 else 1
            step = max(1, (1 << 24) // max(1, int(np.prod(shape)) // rows))
            for r in range(0, rows, step):   # in slices: the embedding is 100M numbers
                part = (min(step, rows - r),) + tuple(shape[1:]) if len(shape) == 2 else shape
                f.write(bf16(mean + scale * rng.standard_normal(part, dtype=np.float32)).tobytes())
    os.replace(tmp, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.layers < 1 or not 1 <= a.loops <= 8:
        print("make-ouro-bench: --layers >= 1 and --loops 1..8", file=sys.stderr)
        return 1
    try:
        os.makedirs(a.out_dir, exist_ok=True)
        write(a.out_dir, config(a.layers, a.loops), a.seed)
    except OSError as e:
        print("make-ouro-bench: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
