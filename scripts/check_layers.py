#!/usr/bin/env python3
"""check_layers.py - libmor's layers point downward only (docs/ARCHITECTURE.md).

Every library file (src/*.c, src/*.h) belongs to a module, every module to a
layer. A file may include the headers of its own module and of modules of
lower layers, never of its own layer's other modules or of a higher layer;
so there is no include circle between modules. The programs (src/tools/**)
reach the library only through the public header (mor.h) and the one
declared internal header (internal.h), besides their own and the shared
program headers under src/tools/. Standard headers (<...>) are not checked.

Prints one line per violation and "check-layers: N files, N includes, N
violations"; exits 1 when there is a violation. With --tap, prints ok/FAIL
lines and "# checks: P passed, F failed" for tests/run.sh instead."""
import os
import re
import sys

# layer: modules (a module is a header name without .h, and the files named for it)
LAYERS = [
    ["tensor", "cpu", "status", "unicode"],                 # 0 the base: types, CPU, errors, Unicode
    ["quant", "abi", "threadpool"],                         # 1 block formats; size-prefixed structs; threads
    ["kernels"],                                            # 2 SIMD kernels, their table, their threads
    ["gguf", "normalize", "pretokenize", "sampler", "json_schema", "jinja"],  # 3 the file reader; text; sampling; JSON Schema to grammar; chat templates
    ["tokenizer"],                                          # 4 tokenizers
    ["model"],                                              # 5 the model: weights, hyperparameters, getters
    ["lora", "kv_cache", "embed_output", "grammar"],        # 6 depth-wise LoRA; KV caching and sharing; the model's two ends; grammars
    ["load", "layer", "router"],                            # 7 loading; one decoder layer; depth routing
    ["recursion"],                                          # 8 recursion scheduling
    ["context"],                                            # 9 contexts, batches, mor_decode
    ["serve", "hooks"],                                     # 10 serving; the test and benchmark hooks
    ["internal"],                                           # 11 the one header programs include
]
# files that belong to a module of another name
ALIASES = {
    "log": "status", "version": "status",
    "kernels_ref": "kernels", "kernels_avx2": "kernels", "kernels_avx512": "kernels", "kernels_amx": "kernels",
    "kernels_neon": "kernels", "kernels_dispatch": "kernels", "kernels_family": "kernels", "kernels_threads": "kernels", "kernels_lora": "kernels", "kernels_vnni": "kernels",
    "tokenize": "tokenizer", "tokenizer_impl": "tokenizer",
    "grammar_parse": "grammar",
    "json_schema_pattern": "json_schema", "json_schema_scalar": "json_schema",
    "sampler_impl": "sampler", "sampler_math": "sampler", "sampler_penalty": "sampler", "sampler_trunc": "sampler",
    "sampler_mirostat": "sampler", "sampler_logprobs": "sampler",
    "jinja_lex": "jinja", "jinja_parse": "jinja", "jinja_value": "jinja", "jinja_eval": "jinja", "jinja_exec": "jinja",
    "jinja_builtins": "jinja", "jinja_str": "jinja", "jinja_filters": "jinja", "chat_template": "jinja",
    "serve_shift": "serve",
    "decode": "context", "batch": "context", "embeddings": "context", "speculate": "context",
}
PUBLIC = "mor.h"
PROGRAM_ALLOWED = {PUBLIC, "internal.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


ROW_STATE = re.compile(r"(?:->|\.)life\b|\bROW_(?:FREE|RUN|KVONLY|DISCARD|EXITED)\b")
# records private to one file: a router's fields (router.c) and a row's record (recursion.c); others
# use their functions (router_get_settings, router_get_stats, rec_depth, rec_tag, ...)
PRIVATE = {"router.c": re.compile(r"struct mor_router\s*\{"), "recursion.c": re.compile(r"\brec_(?:row|at)\b")}
# the server keeps the queue, the slots and the requests: it reads no engine, router or cache field
SERVER_FILES = ("serve.c", "serve_shift.c")
ENGINE_FIELD = re.compile(r"->(?:kv|router|eng|ls)->\w+|\be->(?:rows|stride|cap|kv|router)\b|\beng\.\w+")


def module_of(path):
    name = os.path.splitext(os.path.basename(path))[0]
    return ALIASES.get(name, name)


def main():
    tap = "--tap" in sys.argv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--root" in sys.argv:   # another tree (the tests check the checker on altered copies)
        root = sys.argv[sys.argv.index("--root") + 1]
    src = os.path.join(root, "src")
    layer = {m: i for i, mods in enumerate(LAYERS) for m in mods}
    problems, n_files, n_inc, checks = [], 0, 0, []
    lib_files = sorted(f for f in os.listdir(src) if f.endswith((".c", ".h")))
    lib_headers = {f for f in lib_files if f.endswith(".h")}
    for f in lib_files:
        n_files += 1
        mod = module_of(f)
        if mod not in layer:
            problems.append("src/%s: module '%s' has no layer (scripts/check_layers.py, docs/ARCHITECTURE.md)" % (f, mod))
            continue
        with open(os.path.join(src, f), encoding="utf-8") as fh:
            incs = INCLUDE.findall(fh.read())
        for inc in incs:
            n_inc += 1
            if inc == PUBLIC:
                continue
            if inc not in lib_headers:
                problems.append("src/%s includes \"%s\", which is not a library header" % (f, inc))
                continue
            m2 = module_of(inc)
            if m2 == mod:
                continue
            if m2 not in layer:
                problems.append("src/%s includes %s, whose module has no layer" % (f, inc))
            elif layer[m2] >= layer[mod]:
                problems.append("src/%s (%s, layer %d) includes %s (%s, layer %d): layers point downward only"
                                % (f, mod, layer[mod], inc, m2, layer[m2]))
    # the recursion engine owns the rows in flight: no other file reads or
    # writes a row's state (rec_row.life), nor names its values (ROW_*)
    for f in lib_files:
        if f in ("recursion.c",):
            continue
        with open(os.path.join(src, f), encoding="utf-8") as fh:
            text = fh.read()
        for m in ROW_STATE.finditer(text):
            problems.append("src/%s: '%s': only the recursion engine touches a row's state (recursion.h)"
                            % (f, m.group(0)))
    # private records, and the server's distance from the engine
    for f in lib_files:
        with open(os.path.join(src, f), encoding="utf-8") as fh:
            text = fh.read()
        for owner, pat in PRIVATE.items():
            if f != owner:
                for m in pat.finditer(text):
                    problems.append("src/%s: '%s' is private to src/%s" % (f, m.group(0), owner))
        if f in SERVER_FILES:
            for m in ENGINE_FIELD.finditer(text):
                problems.append("src/%s: '%s': the server reads no engine, router or cache field; it calls their "
                                "functions" % (f, m.group(0)))
    tools = os.path.join(src, "tools")
    tool_headers = {f for _, _, fs in os.walk(tools) for f in fs if f.endswith(".h")}
    for dirpath, _, files in os.walk(tools):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            n_files += 1
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as fh:
                incs = INCLUDE.findall(fh.read())
            for inc in incs:
                n_inc += 1
                if inc in PROGRAM_ALLOWED:
                    continue
                # a program's own headers, the programs' shared ones (src/tools/common)
                # or another program's (mor-tok-train uses the trainer's)
                if os.path.basename(inc) in tool_headers:
                    continue
                problems.append("%s includes \"%s\": programs reach the library through mor.h or internal.h only"
                                % (rel, inc))
    if tap:
        for p in problems:
            print("FAIL - " + p)
        print("ok - %d files, %d includes: every library include points downward, programs use mor.h / internal.h"
              % (n_files, n_inc) if not problems else "FAIL - %d violations" % len(problems))
        print("# checks: %d passed, %d failed" % (0 if problems else 1, len(problems) + (1 if problems else 0)))
    else:
        for p in problems:
            print(p)
        print("check-layers: %d files, %d includes, %d violations" % (n_files, n_inc, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
