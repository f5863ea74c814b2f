"""make_nanbeige.py - llama.cpp GGUF files of its looped Llama architecture
`nanbeige` (Nanbeige4.2), written with llama.cpp's own gguf-py (not part of
libmor: run by tests/peer/run.sh with numpy and LLAMA_CPP/gguf-py on the
path).

The weights are tests/family_ref.py's llama model (GQA, 2 layers), laid out
as llama.cpp's converter writes NanbeigeForCausalLM (conversion/nanbeige.py:
LlamaModel's, Q and K rows permuted for GGML's RoPE), with the keys
nanbeige.num_loops and nanbeige.skip_loop_final_norm, and without
output.weight when the output is tied. One file per entry of
family_ref.NANBEIGE (num_loops, skip_loop_final_norm, tied):

    python3 make_nanbeige.py NAME OUT.gguf
"""
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import family_ref  # noqa: E402
from make_gguf import arr, permute  # noqa: E402


def main():
    name, out = sys.argv[1], sys.argv[2]
    loops, skip, tied = family_ref.NANBEIGE[name]
    cfg, w = family_ref.make_model("llama")
    d, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    Hkv, hd = cfg["num_key_value_heads"], cfg["head_dim"]
    g = gguf.GGUFWriter(out, "nanbeige")
    g.add_name("libmor test model (nanbeige %s)" % name)
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(d)
    g.add_block_count(L)
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(H)
    g.add_head_count_kv(Hkv)
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_rope_freq_base(cfg["rope_theta"])
    g.add_rope_dimension_count(hd)
    g.add_vocab_size(cfg["vocab_size"])
    g.add_num_loops(loops)
    g.add_skip_loop_final_norm(skip)
    g.add_tokenizer_model("no_vocab")
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    t = {"token_embd.weight": arr(w["model.embed_tokens.weight"]), "output_norm.weight": arr(w["model.norm.weight"])}
    if not tied:
        t["output.weight"] = arr(w["lm_head.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for l in range(L):
        for src, dst in names.items():
            x = arr(w["model.layers.%d.%s.weight" % (l, src)])
            if src == "self_attn.q_proj":
                x = permute(x, H, H)
            if src == "self_attn.k_proj":
                x = permute(x, H, Hkv)
            t["blk.%d.%s.weight" % (l, dst)] = x
    for n in sorted(t, key=lambda n: (n.split(".")[1] if n.startswith("blk.") else "", n)):
        g.add_tensor(n, np.ascontiguousarray(t[n], dtype=np.float32))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main()
