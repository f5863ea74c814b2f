"""llama-to-nanbeige.py - a llama.cpp GGUF file of architecture `llama` made
into one of its looped architecture `nanbeige` (Nanbeige4.2), every tensor
kept in its type byte for byte, for measuring looped models at the sizes
users run (issue 41: the anchor kit's tl1b weights with num_loops 2, side by
side with llama.cpp on the same file).

The first K = block_count / LOOPS layers become the physical block that
llama.cpp (src/models/nanbeige.cpp) and libmor (mor-convert: the shared
block of N_r = LOOPS recursions) run LOOPS times, so the unrolled depth is
the original's; the other layers are dropped. This is the Relaxed Recursive
Transformers' "stepwise" initialisation without the uptraining: the weights
of a dense model looped, for speed, not for quality.

    PYTHONPATH=LLAMA_CPP/gguf-py /usr/bin/python3 scripts/llama-to-nanbeige.py \\
        IN.gguf OUT.gguf [--loops 2] [--layers K] [--skip-loop-final-norm]

Needs llama.cpp's gguf-py and numpy (Debian python3-numpy); not part of the
build. Exits non-zero, writing nothing, on a file it cannot convert.
"""
import argparse
import os
import sys

import gguf


def fail(msg):
    print("llama-to-nanbeige: " + msg, file=sys.stderr)
    sys.exit(1)


def kept(name, k):
    """Whether tensor `name` belongs to the looped model of k layers."""
    if not name.startswith("blk."):
        return True
    return int(name.split(".")[1]) < k


def copy_fields(r, w, k, loops, skip):
    for f in r.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue   # the writer writes these itself
        name = "nanbeige." + f.name[len("llama."):] if f.name.startswith("llama.") else f.name
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if name == "nanbeige.block_count":
            val = k
        w.add_key_value(name, val, vt, sub_type=sub)
    w.add_num_loops(loops)
    w.add_skip_loop_final_norm(skip)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--layers", type=int, default=0, help="physical layers (default: block_count / loops)")
    ap.add_argument("--skip-loop-final-norm", action="store_true")
    a = ap.parse_args()
    if os.path.abspath(a.input) == os.path.abspath(a.output):
        fail("the output would overwrite the input")
    r = gguf.GGUFReader(a.input)
    arch = r.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch is None or arch.contents() != "llama":
        fail("%s: architecture %r, not llama" % (a.input, arch.contents() if arch else None))
    n = r.fields["llama.block_count"].contents()
    if a.loops < 1:
        fail("--loops must be at least 1")
    k = a.layers or n // a.loops
    if k < 1 or k > n:
        fail("--layers %d: the file has %d" % (k, n))
    tensors = [t for t in r.tensors if kept(t.name, k)]
    tmp = a.output + ".part"
    w = gguf.GGUFWriter(tmp, "nanbeige", endianess=r.endianess)
    copy_fields(r, w, k, a.loops, a.skip_loop_final_norm)
    for t in tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in tensors:
        w.write_tensor_data(t.data, tensor_endianess=r.endianess)
    w.close()
    os.replace(tmp, a.output)
    print("wrote %s: %d of %d layers looped %d times (unrolled depth %d), %d tensors" %
          (a.output, k, n, a.loops, k * a.loops, len(tensors)))


if __name__ == "__main__":
    main()
