"""make_gguf.py - the test models of tests/family_ref.py as llama.cpp GGUF
files, written with llama.cpp's own gguf-py (not part of libmor: run by
tests/peer/run.sh with numpy and LLAMA_CPP/gguf-py on the path).

The weights are make_model's; the layout is what llama.cpp's converter
(convert_hf_to_gguf.py, conversion/*.py) writes for the family, done here
with numpy in the same way:
  llama     Q and K rows permuted for GGML's normal RoPE (LlamaModel.permute)
  gemma     norm weights + 1 (GemmaModel.modify_tensors); no output.weight
  gemma2    the same; post_attention_layernorm -> post_attention_norm,
            pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm
            -> post_ffw_norm; soft-caps and sliding window as keys
  gptneox   query_key_value from per-head [q; k; v] to [all q; all k; all v]
            (GPTNeoXModel.modify_tensors), biases likewise
No tokenizer: tokenizer.ggml.model = "no_vocab" with {arch}.vocab_size.

    python3 make_gguf.py FAMILY OUT.gguf
    python3 make_gguf.py llama-k256 OUT.gguf

llama-k256 is the llama model at family_ref.K256 (every matrix a multiple of
256 wide), which llama-quantize makes into real k-quants (run.sh).
"""
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import family_ref  # noqa: E402


def arr(t):
    shape, vals = t
    return np.array(vals, dtype=np.float32).reshape(shape)


def permute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    fam, out = sys.argv[1], sys.argv[2]
    over = {}
    if fam == "llama-k256":
        fam, over = "llama", family_ref.K256
    cfg, w = family_ref.make_model(fam, **over)
    arch = {"llama": "llama", "gemma": "gemma", "gemma2": "gemma2", "gptneox": "gptneox"}[fam]
    g = gguf.GGUFWriter(out, arch)
    d, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    Hkv = cfg.get("num_key_value_heads", H)
    g.add_name("libmor test model (%s)" % fam)
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(d)
    g.add_block_count(L)
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(H)
    g.add_vocab_size(cfg["vocab_size"])
    g.add_tokenizer_model("no_vocab")
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    t = {}
    if fam == "gptneox":
        hd = d // H
        g.add_rope_dimension_count(int(cfg["rotary_pct"] * hd))
        g.add_parallel_residual(cfg["use_parallel_residual"])
        g.add_layer_norm_eps(cfg["layer_norm_eps"])
        t["token_embd.weight"] = arr(w["gpt_neox.embed_in.weight"])
        t["output.weight"] = arr(w["embed_out.weight"])
        t["output_norm.weight"] = arr(w["gpt_neox.final_layer_norm.weight"])
        t["output_norm.bias"] = arr(w["gpt_neox.final_layer_norm.bias"])
        for l in range(L):
            p, b = "gpt_neox.layers.%d." % l, "blk.%d." % l
            qkv = arr(w[p + "attention.query_key_value.weight"]).reshape(H, 3, hd, d)
            t[b + "attn_qkv.weight"] = np.concatenate([qkv[:, i].reshape(-1, d) for i in range(3)], axis=0)
            qb = arr(w[p + "attention.query_key_value.bias"]).reshape(H, 3, hd)
            t[b + "attn_qkv.bias"] = np.concatenate([qb[:, i].reshape(-1) for i in range(3)], axis=0)
            for src, dst in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"),
                             ("attention.dense", "attn_output"), ("mlp.dense_h_to_4h", "ffn_up"),
                             ("mlp.dense_4h_to_h", "ffn_down")):
                t[b + dst + ".weight"] = arr(w[p + src + ".weight"])
                t[b + dst + ".bias"] = arr(w[p + src + ".bias"])
    else:
        gem = fam != "llama"
        hd = cfg["head_dim"]
        g.add_head_count_kv(Hkv)
        g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        g.add_rope_freq_base(cfg["rope_theta"])
        if gem:
            g.add_key_length(hd)
            g.add_value_length(hd)
        else:
            g.add_rope_dimension_count(hd)
        if fam == "gemma2":
            g.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
            g.add_final_logit_softcapping(cfg["final_logit_softcapping"])
            g.add_sliding_window(cfg["sliding_window"])
        off = 1.0 if gem else 0.0
        t["token_embd.weight"] = arr(w["model.embed_tokens.weight"])
        t["output_norm.weight"] = arr(w["model.norm.weight"]) + off
        if not gem:
            t["output.weight"] = arr(w["lm_head.weight"])
        names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
        if fam == "gemma2":
            names.update({"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                          "post_feedforward_layernorm": "post_ffw_norm"})
        for l in range(L):
            p, b = "model.layers.%d." % l, "blk.%d." % l
            for src, dst in names.items():
                x = arr(w[p + src + ".weight"])
                if src.endswith("layernorm"):
                    x = x + off
                if fam == "llama" and src == "self_attn.q_proj":
                    x = permute(x, H, H)
                if fam == "llama" and src == "self_attn.k_proj":
                    x = permute(x, H, Hkv)
                t[b + dst + ".weight"] = x
    for name in sorted(t, key=lambda n: (n.split(".")[1] if n.startswith("blk.") else "", n)):
        g.add_tensor(name, np.ascontiguousarray(t[name], dtype=np.float32))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main()
