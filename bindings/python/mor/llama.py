"""mor.llama - llama-cpp-python's high-level API on libmor.

    from mor import Llama                      # was: from llama_cpp import Llama
    llm = Llama(model_path="model.gguf", n_ctx=2048, seed=1, verbose=False)
    out = llm("Q: Name the planets. A:", max_tokens=32, stop=["Q:", "\\n"])
    print(out["choices"][0]["text"])
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="")

The names, argument spellings, defaults and returned dicts are
llama-cpp-python's (its OpenAI-shaped completion, chat completion and
embedding dicts, streaming iterators of chunks). What only libmor has comes as
extra arguments (routing, forced_depth, exit_thresholds, speculate) and, in
each choice, "mor": {"token_ids": [...], "depths": [...]}: the recursions each
generated token ran, as mor-server reports them.

The prompt's cached prefix is reused from call to call (one sequence, as
llama-cpp-python does). A Llama is used by one thread at a time.
"""
import json
import os
import random
import sys
import time
import uuid

from . import (ChatTemplate, Context, Grammar, Model, Sampler, json_schema_to_grammar, logprobs as _logprobs, set_log,
               ROUTER_TYPE_EXPERT, ROUTE_DEFAULT, ROUTE_TOPK, ROUTE_THRESHOLD, ROUTE_FORCED, ROUTE_TOKEN,
               LOG_WARN)
from . import chat as _chat
from . import _tools

__all__ = ["Llama", "LlamaGrammar", "LLAMA_DEFAULT_SEED"]

LLAMA_DEFAULT_SEED = 0xFFFFFFFF   # llama-cpp-python's "pick a random seed"

# Constructor arguments of llama-cpp-python that only place or tune work on
# hardware libmor does not use (GPUs, mlock, micro-batches): accepted, no effect.
_NO_EFFECT = frozenset(("n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "use_mlock", "n_ubatch",
                        "flash_attn", "offload_kqv", "op_offload", "swa_full", "numa", "mul_mat_q",
                        "logits_all", "kv_overrides", "rpc_servers", "no_perf", "embd_normalize"))
_ROUTING = {None: None, "default": ROUTE_DEFAULT, "topk": ROUTE_TOPK, "threshold": ROUTE_THRESHOLD,
            "forced": ROUTE_FORCED, "token": ROUTE_TOKEN}


class LlamaGrammar(object):
    """A GBNF grammar for Llama's grammar= argument (llama-cpp-python's
    LlamaGrammar.from_string / from_json_schema / from_file)."""

    def __init__(self, gbnf):
        self.gbnf = gbnf

    @classmethod
    def from_string(cls, grammar, verbose=True):
        """A grammar of GBNF text (verbose is accepted and ignored)."""
        return cls(grammar)

    @classmethod
    def from_file(cls, file, verbose=True):
        """A grammar of the GBNF text in a file."""
        with open(file, encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json_schema(cls, json_schema, verbose=True):
        """A grammar accepting the JSON texts valid under a JSON Schema (text,
        or a dict; mor.json_schema_to_grammar)."""
        return cls(json_schema_to_grammar(json_schema))


def _grammar_text(grammar, response_format):
    """The GBNF text of grammar= or response_format=, or None."""
    if grammar is not None and response_format is not None:
        raise ValueError("give grammar or response_format, not both")
    if grammar is not None:
        return grammar.gbnf if isinstance(grammar, LlamaGrammar) else grammar
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":   # llama-cpp-python: an optional "schema"; any JSON object without
        return json_schema_to_grammar(response_format.get("schema") or {"type": "object"})
    if kind == "json_schema":   # OpenAI's spelling
        js = response_format.get("json_schema") or {}
        return json_schema_to_grammar(js.get("schema", js) or {})
    raise ValueError("response_format: type must be text, json_object or json_schema, not %r" % (kind,))


class _Stop(object):
    """Generated text checked against stop strings: what may be emitted is
    everything but a tail that could still become a stop string."""

    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self.text = ""

    def push(self, piece):
        """Add text; return True when a stop string appeared (text is then
        cut before it)."""
        start = max(0, len(self.text) - max([len(s) for s in self.stops] or [0]))
        self.text += piece
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            return True
        return False

    def safe(self):
        """How much of text can be emitted for sure."""
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return len(self.text) - hold


class Llama(object):
    """A model and one context, with llama-cpp-python's Llama interface.

    model_path: a GGUF file. n_ctx: tokens of context (0: the model's
    training context). n_batch: tokens per decode. n_threads: worker
    threads (None: libmor's default). seed: the default sampling seed
    (LLAMA_DEFAULT_SEED: a random one). chat_format: one of mor.chat.FORMATS
    (llama-cpp-python's names: "chatml", "llama-2", "llama-3", "gemma",
    "zephyr", "vicuna"; and "phi3"); None: the model's own template
    (tokenizer.chat_template) rendered as Jinja (chat_format is then
    "chat_template.default"), else "llama-2", as llama-cpp-python does. verbose: libmor's warnings to stderr. embedding:
    allow embed()/create_embedding(). type_k/type_v: the KV cache type
    (GGML numbers: 0 F32, 1 F16, 8 Q8_0; both the same).

    libmor's own: routing ("threshold", "topk", "forced", "token", or a
    mor.ROUTE_* value; None: threshold for expert-choice models, else the
    model's router), forced_depth (recursions under "forced"),
    exit_thresholds (a list, one router threshold per recursion), speculate
    (drafts per step at speculate_depth recursions: the same output,
    fewer passes).
    GPU and memory-locking arguments are accepted and have no effect."""

    def __init__(self, model_path, *, n_ctx=512, n_batch=512, n_threads=None, n_threads_batch=None,
                 seed=LLAMA_DEFAULT_SEED, chat_format=None, verbose=True, embedding=False, use_mmap=True,
                 vocab_only=False, last_n_tokens_size=64, type_k=None, type_v=None, routing=None,
                 forced_depth=0, exit_thresholds=None, speculate=0, speculate_depth=1, **kwargs):
        unknown = sorted(k for k in kwargs if k not in _NO_EFFECT)
        if unknown:
            raise TypeError("Llama: unsupported argument%s %s" % ("s" if len(unknown) > 1 else "",
                                                                     ", ".join(unknown)))
        if type_k != type_v:
            raise ValueError("Llama: type_k and type_v must be the same (one KV cache type)")
        if verbose:
            set_log(lambda level, msg: sys.stderr.write("libmor: %s\n" % msg.rstrip("\n")), LOG_WARN)
        self.model_path = os.fspath(model_path)
        self.verbose = verbose
        self.model = Model(self.model_path, no_mmap=not use_mmap, vocab_only=vocab_only)
        self._n_ctx = n_ctx or self.model.n_ctx_train
        self._seed = seed
        self._rng = random.Random(None if seed in (None, LLAMA_DEFAULT_SEED, -1) else seed)
        self.last_n_tokens_size = last_n_tokens_size
        self._speculate = (speculate, speculate_depth)
        self.embedding = embedding
        self._ctx = None
        if not vocab_only:
            self._ctx = Context(self.model, n_ctx=self._n_ctx, max_pos=self._n_ctx, n_batch=max(1, n_batch),
                                n_threads=n_threads or n_threads_batch, kv_type=type_k,
                                capture_hidden=embedding)
            self._route(routing, forced_depth, exit_thresholds)
        self._tokens = []   # what sequence 0 of the cache holds
        self.chat_format = self._pick_chat_format(chat_format)

    # -- setup ---------------------------------------------------------------
    def _route(self, routing, forced_depth, exit_thresholds):
        if routing in _ROUTING:
            mode = _ROUTING[routing]
        elif isinstance(routing, int):
            mode = routing
        else:
            raise ValueError("Llama: routing must be one of %s or a mor.ROUTE_* value"
                             % ", ".join(k for k in _ROUTING if k))
        if mode is None and self.model.router_type == ROUTER_TYPE_EXPERT:
            mode = ROUTE_THRESHOLD   # causal: each generated token's depth decided as it comes
        if mode is not None:
            self._ctx.router.set_mode(mode, forced_depth)
        for r, v in enumerate(exit_thresholds or ()):
            self._ctx.router.set_threshold(r, v)

    def _pick_chat_format(self, chat_format):
        """A built-in format's name, or "chat_template.default" (llama-cpp-python's
        name) for the model's own template rendered as Jinja (self._template)."""
        self._template, self._template_family = None, None
        if chat_format is not None:
            name = _chat.normalize_name(chat_format)
            if name is None:
                raise ValueError("Llama: chat_format %r is not one of %s" % (chat_format, ", ".join(_chat.FORMATS)))
            return name
        source = self.model.meta("tokenizer.chat_template", None)
        if source is not None:
            self._template = ChatTemplate(source)
            self._template_family = _chat.detect(source)   # for its end-of-turn marker
            return "chat_template.default"
        return "llama-2"

    def _special_text(self, token):
        return self.model.token_to_piece(token).decode("utf-8", "replace") if token >= 0 else None

    def _chat_prompt(self, messages, tools=None):
        """(prompt tokens, the end-of-turn marker or None) of messages."""
        if self._template is None:
            text = _chat.render(self.chat_format, messages)
            return self.tokenize(text.encode("utf-8"), add_bos=True, special=True), _chat.end_marker(self.chat_format)
        bos, eos = self._special_text(self.model.token_bos), self._special_text(self.model.token_eos)
        text = self._template.render(_tools.template_messages(messages), add_generation_prompt=True, tools=tools,
                                     bos_token=bos, eos_token=eos)
        add_bos = not (bos and text.startswith(bos))   # a template that writes BOS gets no second one
        tokens = self.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        fam = self._template_family
        return tokens, _chat.end_marker(fam) if fam else None

    # -- llama-cpp-python's small accessors -----------------------------------
    def n_ctx(self):
        """The context size in tokens."""
        return self._n_ctx

    def n_vocab(self):
        """The number of tokens in the vocabulary."""
        return self.model.n_vocab

    def n_embd(self):
        """The width of the model's hidden states (and embeddings)."""
        return self.model.n_embd

    def token_bos(self):
        """The beginning-of-sequence token id (-1: none)."""
        return self.model.token_bos

    def token_eos(self):
        """The end-of-sequence token id (-1: none)."""
        return self.model.token_eos

    def tokenize(self, text, add_bos=True, special=False):
        """Token ids of text (bytes, or str): BOS first when add_bos and the
        model adds one; special: control tokens written in the text are
        parsed as such."""
        return self.model.tokenize(text, add_bos=add_bos and self.model.add_bos != 0, parse_special=special)

    def detokenize(self, tokens, prev_tokens=None, special=False):
        """The bytes of tokens (after prev_tokens, when given: a piece keeps
        its leading space then)."""
        if prev_tokens:
            return b"".join(self.model.token_to_piece(t) for t in tokens)
        return self.model.detokenize(tokens)

    def reset(self):
        """Forget the cached prompt."""
        if self._ctx is not None:
            self._ctx.kv.clear()
        self._tokens = []

    def close(self):
        """Free the context and the model now (also on leaving a with block)."""
        if self._ctx is not None:
            self._ctx.close()
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _need_ctx(self):
        if self._ctx is None:
            raise RuntimeError("Llama: a vocab_only model cannot generate")
        return self._ctx

    # -- evaluation ------------------------------------------------------------
    def _eval_prompt(self, tokens):
        """Decode tokens into sequence 0 after the prefix it already holds;
        return the row with the last token's logits."""
        ctx = self._need_ctx()
        n = 0
        limit = min(len(self._tokens), len(tokens) - 1)   # the last token is decoded again for its logits
        while n < limit and self._tokens[n] == tokens[n]:
            n += 1
        if n < len(self._tokens):
            ctx.kv.seq_rm(0, n, -1)
            self._tokens = self._tokens[:n]
        try:
            row = ctx.decode_tokens(tokens[n:], pos=n, seq=0)
        except BaseException:
            ctx.kv.seq_rm(0, n, -1)   # a chunk may have gone in before the failure
            raise
        self._tokens = list(tokens)
        return row

    def _sampler(self, seed, temperature, top_k, top_p, min_p, repeat_penalty, extra):
        """A Sampler of llama-cpp-python's arguments: extra holds
        frequency_penalty, presence_penalty, typical_p, tfs_z (llama.cpp
        dropped tail-free sampling: only 1.0, off, is taken), mirostat_mode,
        mirostat_tau, mirostat_eta, logit_bias ({token id: bias})."""
        if extra.get("tfs_z") not in (None, 1.0):
            raise ValueError("tfs_z: tail-free sampling is not supported (llama.cpp removed it); use 1.0")
        if seed is None:
            seed = self._rng.getrandbits(63)
        bias = extra.get("logit_bias") or None
        if bias is not None:
            bias = {int(k): float(v) for k, v in bias.items()}   # JSON-style string keys too
        return Sampler(seed=seed, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                       repeat_penalty=repeat_penalty, repeat_last_n=self.last_n_tokens_size,
                       presence_penalty=extra["presence_penalty"], frequency_penalty=extra["frequency_penalty"],
                       typical_p=extra["typical_p"], mirostat=extra["mirostat_mode"],
                       mirostat_tau=extra["mirostat_tau"], mirostat_eta=extra["mirostat_eta"], logit_bias=bias)

    def _run(self, prompt_tokens, max_tokens, sampler, gbnf, stops, n_logprobs):
        """Generate: yields (token, text piece, depth, logprob entry or None)
        and finally returns the finish reason through StopIteration's value."""
        ctx = self._need_ctx()
        if len(prompt_tokens) >= self._n_ctx:
            raise ValueError("Requested tokens (%d) exceed context window of %d" % (len(prompt_tokens), self._n_ctx))
        gbnf, triggers = gbnf if isinstance(gbnf, tuple) else (gbnf, None)   # triggers: a lazy grammar
        grammar = Grammar(self.model, gbnf, triggers=triggers) if gbnf is not None else None
        try:
            eos = self.model.token_eos
            stream = _Utf8(self.model)
            if self._speculate[0] > 0 and n_logprobs is None:
                return (yield from self._run_speculative(prompt_tokens, max_tokens, sampler, grammar, stops, stream))
            for t in prompt_tokens:
                sampler.accept(t)
            row = self._eval_prompt(prompt_tokens)
            n = 0
            while max_tokens is None or max_tokens < 0 or n < max_tokens:
                if len(self._tokens) >= self._n_ctx:
                    return "length"
                if grammar is not None and grammar.must_end:
                    return "stop"
                t = sampler.sample((ctx, row), grammar)
                lp = self._logprob_entry(row, t, n_logprobs) if n_logprobs is not None else None
                if t == eos or t in stops:
                    return "stop"
                ctx.decode_tokens([t], pos=len(self._tokens), seq=0)
                self._tokens.append(t)
                row = 0
                n += 1
                yield t, stream.push(t), ctx.router.depths()[0], lp
            return "length"
        finally:
            if grammar is not None:
                grammar.close()
            sampler.close()

    def _run_speculative(self, prompt_tokens, max_tokens, sampler, grammar, stops, stream):
        """_run with self-speculation by depth (Context.generate's
        speculate): the same tokens, several per pass when drafts hold."""
        ctx = self._ctx
        if len(prompt_tokens) > 1:
            self._eval_prompt(prompt_tokens[:-1])   # reuse the cached prefix; the last token goes below
        else:
            self.reset()
        for t in prompt_tokens[:-1]:
            sampler.accept(t)   # Context.generate takes the last one
        eos, finish, n, seen = self.model.token_eos, "length", 0, []
        room = self._n_ctx - len(prompt_tokens)
        budget = room if max_tokens is None else min(room, max_tokens)
        gen = ctx.generate(prompt_tokens[-1:], max_tokens=budget + 1, sampler=sampler, seq=0, context_shift=False,
                           grammar=grammar, speculate=self._speculate[0], speculate_depth=self._speculate[1])
        try:
            for tok in gen:
                seen.append(tok.id)   # every token generate() yields is in the cache
                if tok.id == eos or tok.id in stops:
                    finish = "stop"
                    break
                if n == budget:
                    break
                n += 1
                yield tok.id, stream.push(tok.id), tok.depth, None
            else:
                finish = "stop" if grammar is not None and grammar.must_end else "length"
        finally:
            gen.close()
            held = ctx.kv.seq_pos_max(0) + 1
            self._tokens = (list(prompt_tokens) + seen)[:held]
        return finish

    def _logprob_entry(self, row, token, k):
        lp = _logprobs((self._ctx, row), token, k)
        return token, lp.logprob, lp.top

    # -- completions -------------------------------------------------------------
    def __call__(self, prompt, *args, **kwargs):
        """create_completion(prompt, ...): llm(prompt, max_tokens=32, ...)."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_completion(self, prompt, suffix=None, max_tokens=16, temperature=0.8, top_p=0.95, min_p=0.05,
                          typical_p=1.0, logprobs=None, echo=False, stop=None, frequency_penalty=0.0,
                          presence_penalty=0.0, repeat_penalty=1.0, top_k=40, stream=False, seed=None,
                          tfs_z=1.0, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, model=None,
                          stopping_criteria=None, logits_processor=None, grammar=None, logit_bias=None):
        """A completion of prompt (str or token ids), as llama-cpp-python
        returns it: {"id", "object": "text_completion", "created", "model",
        "choices": [{"text", "index", "logprobs", "finish_reason", "mor"}],
        "usage"}; with stream=True an iterator of such chunks, each with the
        new text. max_tokens None or <= 0: until the context is full. stop:
        a string or strings that end the text (not included). logprobs: the
        number of most likely alternatives to report per token (0: only the
        chosen ones). grammar: a LlamaGrammar or GBNF text."""
        if suffix is not None or stopping_criteria is not None or logits_processor is not None:
            raise ValueError("suffix, stopping_criteria and logits_processor are not supported")
        sampler = self._sampler(seed, temperature, top_k, top_p, min_p, repeat_penalty,
                                {"frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
                                 "typical_p": typical_p, "tfs_z": tfs_z, "mirostat_mode": mirostat_mode,
                                 "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta,
                                 "logit_bias": logit_bias})
        tokens = self._prompt_tokens(prompt)
        echoed = None
        if echo:   # the prompt as text: token ids and bytes decoded
            echoed = prompt if isinstance(prompt, str) else prompt.decode("utf-8", "replace") \
                if isinstance(prompt, bytes) else self.detokenize(tokens).decode("utf-8", "replace")
        job = _Completion(self, tokens, echoed, max_tokens, sampler,
                          _grammar_text(grammar, None), stop, logprobs, model, "text_completion")
        return job.stream() if stream else job.result()

    def _prompt_tokens(self, prompt):
        if isinstance(prompt, (str, bytes)):
            toks = self.tokenize(prompt.encode("utf-8") if isinstance(prompt, str) else prompt, True, True)
        else:
            toks = list(prompt)
        if not toks:
            if self.model.token_bos < 0:
                raise ValueError("the prompt has no tokens (and the model no BOS token to start from)")
            toks = [self.model.token_bos]   # llama.cpp starts an empty prompt with BOS
        return toks

    def create_chat_completion(self, messages, functions=None, function_call=None, tools=None, tool_choice=None,
                               temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, typical_p=1.0, stream=False,
                               stop=None, seed=None, response_format=None, max_tokens=None, presence_penalty=0.0,
                               frequency_penalty=0.0, repeat_penalty=1.0, tfs_z=1.0, mirostat_mode=0,
                               mirostat_tau=5.0, mirostat_eta=0.1, model=None, logits_processor=None,
                               grammar=None, logit_bias=None, logprobs=None, top_logprobs=None,
                               parallel_tool_calls=True):
        """A chat completion of messages (OpenAI's {"role", "content"} dicts)
        rendered in self.chat_format: {"id", "object": "chat.completion",
        "created", "model", "choices": [{"index", "message": {"role":
        "assistant", "content"}, "logprobs", "finish_reason", "mor"}],
        "usage"}; stream=True: chunks with "delta"s, the first {"role":
        "assistant"}. response_format: {"type": "json_object"} (with an
        optional "schema") or OpenAI's {"type": "json_schema", "json_schema":
        {"schema": ...}} constrains the answer. logprobs=True, top_logprobs=N:
        OpenAI's per-token "content" list. tools, tool_choice ("auto" (the
        default), "none", "required" or {"type": "function", "function":
        {"name": ...}}), parallel_tool_calls; the older functions and
        function_call: OpenAI's function calling, as mor-server does it (the
        model's Jinja template renders the tools; a call forced or, under
        "auto", begun is constrained by the tools' grammar; the reply is
        parsed into message["tool_calls"], finish_reason "tool_calls")."""
        tools, choice = _tools.request(tools, tool_choice, functions, function_call)
        if logits_processor is not None:
            raise ValueError("logits_processor is not supported")
        sampler = self._sampler(seed, temperature, top_k, top_p, min_p, repeat_penalty,
                                {"frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
                                 "typical_p": typical_p, "tfs_z": tfs_z, "mirostat_mode": mirostat_mode,
                                 "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta,
                                 "logit_bias": logit_bias})
        if tools is not None and self._template is None:
            raise ValueError("tools need a Jinja chat template (the model's), not the built-in format %r"
                             % self.chat_format)
        gbnf = _grammar_text(grammar, response_format)
        fmt = _tools.detect(self._template.source) if tools is not None else None
        if fmt is not None and choice != "none":
            gbnf = _tools.constraint(fmt, tools, choice, parallel_tool_calls, gbnf)
        tokens, marker = self._chat_prompt(messages, tools)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if marker:
            stops.append(marker)
        n_lp = (top_logprobs or 0) if logprobs else None
        job = _Completion(self, tokens, None, max_tokens, sampler, gbnf, stops, n_lp, model, "chat.completion")
        job.tools_fmt = fmt if choice != "none" else None
        return job.chat_stream() if stream else job.chat_result()

    # -- embeddings --------------------------------------------------------------
    def embed(self, input, normalize=False, truncate=True, return_count=False):
        """The embedding of a text (a list of floats), or of each of a list of
        texts: the mean of the last hidden states of its tokens (unit length
        when normalize). Needs Llama(embedding=True). return_count: also
        the number of tokens read, as (embeddings, count)."""
        if not self.embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        ctx = self._need_ctx()
        texts = [input] if isinstance(input, str) else list(input)
        out, count = [], 0
        self.reset()   # embed() uses sequence 0 of the cache
        for text in texts:
            toks = self.tokenize(text.encode("utf-8"), add_bos=True)
            limit = min(ctx.n_batch, self._n_ctx)
            if len(toks) > limit:
                if not truncate:
                    raise ValueError("Requested tokens (%d) exceed batch size of %d" % (len(toks), limit))
                toks = toks[:limit]
            count += len(toks)
            out.append(list(ctx.embed(toks, seq=0, pooling="mean", normalize=normalize)))
        result = out[0] if isinstance(input, str) else out
        return (result, count) if return_count else result

    def create_embedding(self, input, model=None):
        """OpenAI's embedding response for a text or a list of texts."""
        embeds, count = self.embed(input, normalize=True, return_count=True)
        if isinstance(input, str):
            embeds = [embeds]
        return {"object": "list", "model": model or self.model_path,
                "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
                "usage": {"prompt_tokens": count, "total_tokens": count}}


class _Utf8(object):
    """Token bytes to text, holding back an incomplete UTF-8 character."""

    def __init__(self, model):
        import codecs
        self.model = model
        self.dec = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token):
        return self.dec.decode(self.model.token_to_piece(token))


class _Completion(object):
    """One generation turned into llama-cpp-python's dicts."""

    def __init__(self, llm, tokens, echo, max_tokens, sampler, gbnf, stop, n_logprobs, model, kind):
        self.llm, self.tokens, self.echo = llm, tokens, echo
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop = _Stop(stops)
        # a stop string that is one special token (an end-of-turn marker) also stops as that token
        self.stop_ids = set()
        for s in stops:
            ids = llm.model.tokenize(s, parse_special=True) if s else []
            if len(ids) == 1 and llm.model.detokenize(ids).decode("utf-8", "replace") != s:
                self.stop_ids.add(ids[0])
        self.gen = llm._run(tokens, max_tokens if max_tokens and max_tokens > 0 else None, sampler, gbnf,
                            self.stop_ids, n_logprobs)
        self.n_logprobs = n_logprobs
        self.id = ("chatcmpl-" if kind == "chat.completion" else "cmpl-") + str(uuid.uuid4())
        self.created = int(time.time())
        self.model = model or llm.model_path
        self.ids, self.depths, self.lps = [], [], []
        self.finish = None

    def _steps(self):
        """(new text, finished) after each token; the stop strings cut the text."""
        emitted = 0
        try:
            while True:
                t, piece, depth, lp = next(self.gen)
                self.ids.append(t)
                self.depths.append(depth)
                self.lps.append((lp, len(self.stop.text)))
                if self.stop.push(piece):
                    self.gen.close()
                    self.finish = "stop"
                    break
                safe = self.stop.safe()
                if safe > emitted:
                    yield self.stop.text[emitted:safe]
                    emitted = safe
        except StopIteration as e:
            self.finish = e.value
        if len(self.stop.text) > emitted:
            yield self.stop.text[emitted:]

    def _mor(self):
        return {"token_ids": list(self.ids), "depths": list(self.depths)}

    def _usage(self):
        n = len(self.ids)
        return {"prompt_tokens": len(self.tokens), "completion_tokens": n, "total_tokens": len(self.tokens) + n}

    def _piece_text(self, t):
        return self.llm.model.token_to_piece(t).decode("utf-8", "replace")

    def _completion_logprobs(self, offset):
        """llama-cpp-python's text-completion logprobs of the tokens whose
        text is in the output."""
        out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for (lp, at) in self.lps:
            if lp is None or at >= len(self.stop.text) and at > 0:
                continue
            t, logprob, top = lp
            out["tokens"].append(self._piece_text(t))
            out["text_offset"].append(offset + at)
            out["token_logprobs"].append(logprob)
            alts = {self._piece_text(i): v for i, v in top}
            alts[self._piece_text(t)] = logprob
            out["top_logprobs"].append(alts)
        return out

    def _chat_logprobs(self):
        content = []
        for (lp, at) in self.lps:
            if lp is None or at >= len(self.stop.text) and at > 0:
                continue
            t, logprob, top = lp
            b = self.llm.model.token_to_piece(t)
            content.append({"token": b.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(b),
                            "top_logprobs": [{"token": self._piece_text(i), "logprob": v,
                                              "bytes": list(self.llm.model.token_to_piece(i))} for i, v in top]})
        return {"content": content}

    def _head(self, obj):
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # -- text completions
    def result(self):
        for _ in self._steps():
            pass
        prefix = self.echo or ""
        choice = {"text": prefix + self.stop.text, "index": 0,
                  "logprobs": self._completion_logprobs(len(prefix)) if self.n_logprobs is not None else None,
                  "finish_reason": self.finish, "mor": self._mor()}
        return dict(self._head("text_completion"), choices=[choice], usage=self._usage())

    def stream(self):
        head = self._head("text_completion")
        if self.echo:
            yield dict(head, choices=[{"text": self.echo, "index": 0, "logprobs": None, "finish_reason": None}])
        n = 0
        for text in self._steps():
            ids, depths = self.ids[n:], self.depths[n:]
            n = len(self.ids)
            yield dict(head, choices=[{"text": text, "index": 0, "logprobs": None, "finish_reason": None,
                                       "mor": {"token_ids": ids, "depths": depths}}])
        yield dict(head, choices=[{"text": "", "index": 0, "logprobs": None, "finish_reason": self.finish,
                                   "mor": {"token_ids": self.ids[n:], "depths": self.depths[n:]}}])

    # -- chat completions
    tools_fmt = None   # the tool-call format to parse the reply in (None: no tools)

    def chat_result(self):
        for _ in self._steps():
            pass
        message = {"role": "assistant", "content": self.stop.text}
        if self.tools_fmt is not None:
            content, calls = _tools.parse(self.tools_fmt, self.stop.text)
            if calls:
                message = {"role": "assistant", "content": content or None,
                           "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                          for i, n, a in calls]}
                self.finish = "tool_calls"
        choice = {"index": 0, "message": message,
                  "logprobs": self._chat_logprobs() if self.n_logprobs is not None else None,
                  "finish_reason": self.finish, "mor": self._mor()}
        return dict(self._head("chat.completion"), choices=[choice], usage=self._usage())

    def chat_stream(self):
        head = self._head("chat.completion.chunk")
        yield dict(head, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                   "finish_reason": None}])
        n, sent = 0, 0
        for text in self._steps():
            if self.tools_fmt is not None:   # the text up to what may begin a call
                safe = _tools.stream_safe(self.tools_fmt, self.stop.text)
                text, sent = self.stop.text[sent:safe] if safe > sent else "", max(sent, safe)
                if not text:
                    continue
            ids, depths = self.ids[n:], self.depths[n:]
            n = len(self.ids)
            yield dict(head, choices=[{"index": 0, "delta": {"content": text}, "logprobs": None,
                                       "finish_reason": None, "mor": {"token_ids": ids, "depths": depths}}])
        if self.tools_fmt is not None:
            yield from self._tool_deltas(head, sent)
        yield dict(head, choices=[{"index": 0, "delta": {}, "logprobs": None, "finish_reason": self.finish,
                                   "mor": {"token_ids": self.ids[n:], "depths": self.depths[n:]}}])

    def _tool_deltas(self, head, sent):
        """At the end of a streamed reply with tools: the content not sent yet,
        then each call as OpenAI's deltas (name, then its whole arguments)."""
        content, calls = _tools.parse(self.tools_fmt, self.stop.text)
        if len(content) > sent:
            yield dict(head, choices=[{"index": 0, "delta": {"content": content[sent:]}, "logprobs": None,
                                       "finish_reason": None}])
        for k, (cid, name, args) in enumerate(calls):
            fn = {"index": k, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
            yield dict(head, choices=[{"index": 0, "delta": {"tool_calls": [fn]}, "logprobs": None,
                                       "finish_reason": None}])
            yield dict(head, choices=[{"index": 0, "delta": {"tool_calls": [{"index": k, "function": {
                "arguments": args}}]}, "logprobs": None, "finish_reason": None}])
        if calls:
            self.finish = "tool_calls"
