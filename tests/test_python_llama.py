"""test_python_llama.py - mor.Llama, llama-cpp-python's API on libmor.

A stdlib unittest suite, each test one check of tests/testlib.py, on the
bundled model (models/brown-mor.gguf):
  - completions: greedy text and ids equal Model.generate's; stop strings cut
    the text (streamed the same, also across token boundaries); max_tokens
    ends with "length"; echo; seeds repeat; the cached prompt prefix is reused
    and gives what a fresh Llama gives; the dict shapes are
    llama-cpp-python's; logprobs are mor.logprobs of the same logits;
  - chat: every built-in format renders what mor-server's chat.c renders
    (the expected strings below), the model's own template picks the format,
    streaming deltas add up to the message, response_format constrains the
    answer to JSON of the schema;
  - embeddings equal Context.embed's, create_embedding's shape;
  - speculation gives the same text; bad arguments raise clear errors;
  - the llama-cpp-python script of bindings/python/README.md runs with only
    its import line changed.
Under MOR_TEST_INSTALLED=1 the installed package is tested (test_python_package.py).
"""
import json
import math
import os
import re
import subprocess
import sys
import unittest

import testlib as t

t.reexec_under_asan()
t.use_bindings()
import mor  # noqa: E402

BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")
PROMPT = "The jury said that"


def llama(**kw):
    kw.setdefault("n_ctx", 256)
    kw.setdefault("seed", 1)
    kw.setdefault("verbose", False)
    return mor.Llama(model_path=BROWN, **kw)


def causal(model, ctx):
    """The routing Llama uses by default: THRESHOLD for an expert-choice model."""
    if model.router_type == mor.ROUTER_TYPE_EXPERT:
        ctx.router.set_mode(mor.ROUTE_THRESHOLD)


def text_of(out):
    return out["choices"][0]["text"]


class Completion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = llama()

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()

    def test_greedy_equals_model_generate(self):
        out = self.llm(PROMPT, max_tokens=20, temperature=0)
        with mor.Model(BROWN) as m:
            ref = [tok.id for tok in m.generate(PROMPT, max_tokens=20, temperature=0.0)]
        ids = out["choices"][0]["mor"]["token_ids"]
        self.assertEqual(ids, ref[:len(ids)])
        self.assertEqual(len(ids), 20)
        self.assertEqual(out["choices"][0]["finish_reason"], "length")
        with mor.Model(BROWN) as m:
            self.assertEqual(text_of(out), m.detokenize(ref).decode("utf-8", "replace"))

    def test_shapes(self):
        out = self.llm(PROMPT, max_tokens=4, temperature=0)
        self.assertTrue(out["id"].startswith("cmpl-"))
        self.assertEqual(out["object"], "text_completion")
        self.assertIsInstance(out["created"], int)
        self.assertEqual(out["model"], BROWN)
        self.assertEqual(sorted(out["choices"][0]), ["finish_reason", "index", "logprobs", "mor", "text"])
        u = out["usage"]
        n_prompt = len(self.llm.tokenize(PROMPT.encode()))
        self.assertEqual(u, {"prompt_tokens": n_prompt, "completion_tokens": 4, "total_tokens": n_prompt + 4})
        self.assertEqual(len(out["choices"][0]["mor"]["depths"]), 4)
        self.assertTrue(all(1 <= d <= 3 for d in out["choices"][0]["mor"]["depths"]))

    def test_stop_strings(self):
        full = text_of(self.llm(PROMPT, max_tokens=30, temperature=0))
        # a stop string that starts inside a token's text: the text is cut before it
        cut = full.index("a", 3)
        stop = full[cut:cut + 4]
        out = self.llm(PROMPT, max_tokens=30, temperature=0, stop=[stop, "zzzz"])
        self.assertEqual(text_of(out), full[:full.index(stop)])
        self.assertEqual(out["choices"][0]["finish_reason"], "stop")
        chunks = list(self.llm(PROMPT, max_tokens=30, temperature=0, stop=stop, stream=True))
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks), text_of(out))
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "stop")
        self.assertTrue(all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]))
        ids = sum((c["choices"][0]["mor"]["token_ids"] for c in chunks), [])
        self.assertEqual(ids, out["choices"][0]["mor"]["token_ids"])

    def test_echo(self):
        out = self.llm(PROMPT, max_tokens=5, temperature=0, echo=True)
        plain = self.llm(PROMPT, max_tokens=5, temperature=0)
        self.assertEqual(text_of(out), PROMPT + text_of(plain))
        ids = self.llm.tokenize(PROMPT.encode())
        by_ids = self.llm(ids, max_tokens=5, temperature=0, echo=True)
        self.assertEqual(text_of(by_ids), self.llm.detokenize(ids).decode() + text_of(plain))
        self.assertEqual(text_of(self.llm(PROMPT.encode(), max_tokens=5, temperature=0, echo=True)), text_of(out))

    def test_seeds_repeat(self):
        a = self.llm(PROMPT, max_tokens=16, temperature=1.0, seed=7)
        b = self.llm(PROMPT, max_tokens=16, temperature=1.0, seed=7)
        c = self.llm(PROMPT, max_tokens=16, temperature=1.0, seed=8)
        self.assertEqual(text_of(a), text_of(b))
        self.assertNotEqual(a["choices"][0]["mor"]["token_ids"], c["choices"][0]["mor"]["token_ids"])
        # the Llama's seed picks each call's seed: two Llamas of one seed agree call by call
        with llama(seed=5) as x, llama(seed=5) as y:
            for _ in range(2):
                self.assertEqual(text_of(x(PROMPT, max_tokens=8)), text_of(y(PROMPT, max_tokens=8)))

    def test_prefix_reuse(self):
        first = PROMPT + " the city"
        self.llm(first, max_tokens=6, temperature=0)
        held = list(self.llm._tokens)
        self.assertEqual(self.llm._ctx.kv.seq_pos_max(0) + 1, len(held))
        second = self.llm(PROMPT + " the county", max_tokens=8, temperature=0)
        with llama() as fresh:
            self.assertEqual(second, dict(fresh(PROMPT + " the county", max_tokens=8, temperature=0),
                                          id=second["id"], created=second["created"]))
        self.assertEqual(self.llm._ctx.kv.seq_pos_max(0) + 1, len(self.llm._tokens))

    def test_logprobs(self):
        out = self.llm(PROMPT, max_tokens=5, temperature=0, logprobs=3)
        lp = out["choices"][0]["logprobs"]
        ids = out["choices"][0]["mor"]["token_ids"]
        self.assertEqual(len(lp["tokens"]), 5)
        with mor.Model(BROWN) as m, m.context(n_ctx=64) as ctx:
            causal(m, ctx)
            prompt = m.tokenize(PROMPT, add_bos=True, parse_special=True)
            row = ctx.decode_tokens(prompt)
            for i, tok in enumerate(ids):
                ref = mor.logprobs(ctx.logits(row), tok, 3)
                self.assertEqual(lp["token_logprobs"][i], ref.logprob)
                self.assertEqual(lp["tokens"][i], m.token_to_piece(tok).decode())
                want = {m.token_to_piece(a).decode(): v for a, v in ref.top}
                want[lp["tokens"][i]] = ref.logprob
                self.assertEqual(lp["top_logprobs"][i], want)
                row = ctx.decode_tokens([tok], pos=len(prompt) + i)
        offsets = lp["text_offset"]
        self.assertEqual(offsets[0], 0)
        self.assertEqual([text_of(out)[o:o + len(s)] for o, s in zip(offsets, lp["tokens"])], lp["tokens"])

    def test_length_and_context(self):
        with llama(n_ctx=16) as small:
            out = small(PROMPT, max_tokens=0, temperature=0)   # 0: until the context is full
            self.assertEqual(out["choices"][0]["finish_reason"], "length")
            self.assertEqual(out["usage"]["total_tokens"], 16)
            with self.assertRaisesRegex(ValueError, "exceed context window"):
                small(" word" * 40, max_tokens=4)

    def test_grammar(self):
        g = mor.LlamaGrammar.from_string('root ::= " the" (" jury" | " city") "."')
        out = self.llm(PROMPT, max_tokens=20, grammar=g, seed=3)
        self.assertIn(text_of(out), (" the jury.", " the city."))
        self.assertEqual(out["choices"][0]["finish_reason"], "stop")

    def test_speculation_same_text(self):
        plain = self.llm(PROMPT, max_tokens=24, temperature=0.9, seed=11)
        with llama(speculate=3) as spec:
            out = spec(PROMPT, max_tokens=24, temperature=0.9, seed=11)
            self.assertEqual(out["choices"][0]["mor"]["token_ids"], plain["choices"][0]["mor"]["token_ids"])
            self.assertEqual(text_of(out), text_of(plain))
            again = spec(PROMPT + " the", max_tokens=10, temperature=0)
            ref = self.llm(PROMPT + " the", max_tokens=10, temperature=0)
            self.assertEqual(text_of(again), text_of(ref))

    def test_sampling_fields(self):
        """llama-cpp-python's sampling arguments reach libmor's sampler: the
        same tokens as a mor.Sampler of the same fields over the same logits."""
        kw = dict(presence_penalty=0.5, frequency_penalty=0.3, typical_p=0.9, logit_bias={"310": -100.0, 258: 2.0})
        out = self.llm(PROMPT, max_tokens=12, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=21, **kw)
        with mor.Model(BROWN) as m, m.context(n_ctx=64) as ctx, \
                mor.Sampler(seed=21, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                            repeat_last_n=64, presence_penalty=0.5, frequency_penalty=0.3, typical_p=0.9,
                            logit_bias={310: -100.0, 258: 2.0}) as s:
            causal(m, ctx)
            ref = [t.id for t in ctx.generate(m.tokenize(PROMPT, add_bos=True, parse_special=True), max_tokens=12,
                                              sampler=s)]
        ids = out["choices"][0]["mor"]["token_ids"]
        self.assertEqual(ids, ref[:len(ids)])
        self.assertNotIn(310, ids)
        miro = self.llm(PROMPT, max_tokens=8, seed=3, mirostat_mode=2, mirostat_tau=4.0, mirostat_eta=0.2)
        self.assertEqual(miro, dict(self.llm(PROMPT, max_tokens=8, seed=3, mirostat_mode=2, mirostat_tau=4.0,
                                             mirostat_eta=0.2), id=miro["id"], created=miro["created"]))
        with self.assertRaisesRegex(ValueError, "tfs_z"):
            self.llm(PROMPT, max_tokens=2, tfs_z=0.9)

    def test_routing_forced_depth(self):
        with llama(routing="forced", forced_depth=1) as one:
            out = one(PROMPT, max_tokens=6, temperature=0)
            self.assertEqual(out["choices"][0]["mor"]["depths"], [1] * 6)

    def test_tokenize(self):
        ids = self.llm.tokenize(b"The jury")
        plain = self.llm.tokenize(b"The jury", add_bos=False)
        bos = self.llm.model.add_bos != 0   # add_bos=True adds one where the model's vocabulary does
        self.assertEqual(ids, [self.llm.token_bos()] + plain if bos else plain)
        self.assertEqual(self.llm.detokenize(plain), b"The jury")
        self.assertEqual(self.llm.tokenize("The jury", add_bos=False), plain)
        self.assertEqual((self.llm.n_ctx(), self.llm.n_vocab()), (256, self.llm.model.n_vocab))


class Chat(unittest.TestCase):
    MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": [{"type": "text", "text": "Go"}]}]
    # what src/tools/mor-server/chat.c renders for MSGS
    EXPECTED = {
        "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n"
                  "Hello.<|im_end|>\n<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n",
        "llama-3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
                   "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nGo<|eot_id|><|start_header_id|>assistant"
                   "<|end_header_id|>\n\n",
        "gemma": "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                 "<start_of_turn>user\nGo<end_of_turn>\n<start_of_turn>model\n",
        "zephyr": "<|system|>\nBe brief.</s>\n<|user|>\n Hi </s>\n<|assistant|>\nHello.</s>\n<|user|>\nGo</s>\n"
                  "<|assistant|>\n",
        "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\n Hi <|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nGo<|end|>\n"
                "<|assistant|>\n",
        "llama-2": "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi  [/INST] Hello.</s>[INST] Go [/INST]",
        "vicuna": "Be brief.\n\nUSER:  Hi \nASSISTANT: Hello.</s>\nUSER: Go\nASSISTANT:",
    }

    def test_formats_render_as_the_server(self):
        self.assertEqual(sorted(mor.chat.FORMATS), sorted(self.EXPECTED))
        for name, want in self.EXPECTED.items():
            self.assertEqual(mor.chat.render(name, self.MSGS), want, name)
        self.assertEqual(mor.chat.render("llama3", self.MSGS), self.EXPECTED["llama-3"])

    def test_detect_from_template(self):
        self.assertEqual(mor.chat.detect("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"), "chatml")
        self.assertEqual(mor.chat.detect("<|start_header_id|>x<|end_header_id|>"), "llama-3")
        self.assertIsNone(mor.chat.detect("[SYSTEM_PROMPT] [INST]"))
        self.assertIsNone(mor.chat.detect(None))
        with llama() as m:   # the bundled model has no template: llama-cpp-python's default
            self.assertEqual(m.chat_format, "llama-2")

    def test_completion_and_stream(self):
        with llama(chat_format="chatml") as llm:
            msgs = [{"role": "user", "content": "The jury"}]
            out = llm.create_chat_completion(messages=msgs, max_tokens=12, seed=4)
            self.assertTrue(out["id"].startswith("chatcmpl-"))
            self.assertEqual(out["object"], "chat.completion")
            msg = out["choices"][0]["message"]
            self.assertEqual(msg["role"], "assistant")
            chunks = list(llm.create_chat_completion(messages=msgs, max_tokens=12, seed=4, stream=True))
            self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant"})
            self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
            self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), msg["content"])
            self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], out["choices"][0]["finish_reason"])
            prompt = llm.tokenize(mor.chat.render("chatml", msgs).encode(), special=True)
            self.assertEqual(out["usage"]["prompt_tokens"], len(prompt))

    def test_response_format_schema(self):
        schema = {"type": "object", "properties": {"verdict": {"enum": ["guilty", "free"]}},
                  "required": ["verdict"], "additionalProperties": False}
        with llama(chat_format="chatml") as llm:
            for rf in ({"type": "json_object", "schema": schema},
                       {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}}):
                out = llm.create_chat_completion(messages=[{"role": "user", "content": "Verdict?"}],
                                                 response_format=rf, max_tokens=40, seed=2)
                self.assertEqual(out["choices"][0]["finish_reason"], "stop")
                self.assertIn(json.loads(out["choices"][0]["message"]["content"])["verdict"], ("guilty", "free"))

    def test_chat_logprobs(self):
        with llama(chat_format="chatml") as llm:
            out = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                             temperature=0, logprobs=True, top_logprobs=2)
            content = out["choices"][0]["logprobs"]["content"]
            self.assertEqual(len(content), 3)
            self.assertEqual(sorted(content[0]), ["bytes", "logprob", "token", "top_logprobs"])
            self.assertEqual(len(content[0]["top_logprobs"]), 2)
            self.assertEqual(content[0]["top_logprobs"][0]["logprob"], content[0]["logprob"])   # greedy: the best


class Templates(unittest.TestCase):
    """mor.ChatTemplate renders real models' templates as jinja2 does (the
    expected texts of tests/data/chat_templates); Llama uses the model's own."""
    BASE = os.path.join(t.ROOT, "tests", "data", "chat_templates")

    def conversation(self, name):
        with open(os.path.join(self.BASE, "conversations", name, "messages.json")) as f:
            return json.load(f)

    def test_render_as_jinja2(self):
        for tpl in ("Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "microsoft-Phi-3.5-mini-instruct"):
            with open(os.path.join(self.BASE, tpl + ".jinja")) as f, mor.ChatTemplate(f.read()) as ct:
                for conv in ("system_user", "multi_turn"):
                    with open(os.path.join(self.BASE, "expected", "%s.%s.txt" % (tpl, conv)), encoding="utf-8") as f:
                        want = f.read()
                    got = ct.render(self.conversation(conv), bos_token="<s>", eos_token="</s>", now=1721995200)
                    self.assertEqual(got, want, "%s.%s" % (tpl, conv))

    def test_raise_and_syntax_errors(self):
        with open(os.path.join(self.BASE, "google-gemma-2-2b-it.jinja")) as f, mor.ChatTemplate(f.read()) as ct:
            with self.assertRaisesRegex(mor.InvalidArgError, "System role not supported"):
                ct.render(self.conversation("system_user"))
        with self.assertRaisesRegex(mor.InvalidArgError, "line 2"):
            mor.ChatTemplate("ok\n{% for m in messages %}")
        self.assertEqual(mor.ChatTemplate("{{ x }}-{{ add_generation_prompt }}").render([], x=3), "3-True")

    def test_llama_uses_the_models_template(self):
        import tempfile
        src = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tpl.gguf")
            t.gguf_with_key(BROWN, path, "tokenizer.chat_template", src)
            with mor.Llama(model_path=path, n_ctx=256, seed=1, verbose=False) as llm, llama(chat_format="chatml") as ref:
                self.assertEqual(llm.chat_format, "chat_template.default")
                msgs = [{"role": "user", "content": "The jury"}]
                a = llm.create_chat_completion(messages=msgs, max_tokens=10, seed=4)
                b = ref.create_chat_completion(messages=msgs, max_tokens=10, seed=4)
                self.assertEqual(a["choices"][0]["mor"]["token_ids"], b["choices"][0]["mor"]["token_ids"])
                self.assertEqual(a["usage"], b["usage"])


# A small Hermes-format template (a real one overflows the model's 256-token context once tools are
# rendered) and tools with schemas the calls must satisfy.
HERMES = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
          "<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n"
          "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
          "{% if tools %}{{ tools | length }} tools{% endif %}<|im_start|>assistant\n")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                                          "days": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 7}},
                                          "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]


def call_valid(name, args):
    a = json.loads(args)
    if name == "get_weather":
        return set(a) == {"city", "days"} and len(a["city"]) <= 12 and 1 <= a["days"] <= 7
    return name == "get_time" and a == {"zone": a["zone"]} and a["zone"] in ("UTC", "CET")


class Tools(unittest.TestCase):
    """Function calling in mor.Llama, as mor-server does it: the parsers on
    the server's fixed texts, calls forced by the tools' grammar (required,
    named; whole and streamed), auto lazy (free text until a call begins),
    the older functions/function_call, and the errors."""

    def test_parsers_as_the_server(self):
        from mor import _tools
        cases = [   # tests/test_server.py's /test/tools-parse cases
            ("hermes", "Let me see.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
             "</tool_call>", "Let me see.", [("get_weather", {"city": "Paris"})]),
            ("hermes", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
             "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>", "", [("a", {"x": [1, {"y": "}"}]}), ("b", {})]),
            ("hermes", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}", "", [("a", {"x": 1})]),
            ("hermes", "<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{not json}\n</tool_call>", []),
            ("generic", "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"q\": \"s\"}}]}", "", [("a", {"q": "s"})]),
            ("generic", "{\"tool_call\": {\"name\": \"a\", \"arguments\": \"{\\\"q\\\": 1}\"}}", "", [("a", {"q": 1})]),
            ("generic", "{\"response\": \"hi\"}", "hi", []),
            ("llama3", "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
             "", [("a", {"x": 1}), ("b", {})]),
            ("mistral", "Hi [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", "Hi", [("a", {})]),
            ("hermes", "<tool_call>{\"name\": \"\\u0000x\", \"arguments\": {}}</tool_call>",
             "<tool_call>{\"name\": \"\\u0000x\", \"arguments\": {}}</tool_call>", []),
        ]
        for fmt, text, content, calls in cases:
            got, found = _tools.parse(fmt, text)
            self.assertEqual((got, [(n, json.loads(a)) for _, n, a in found]), (content, calls), text)
            self.assertTrue(all(re.match(r"^call_[A-Za-z0-9]{24}$", i) for i, _, _ in found))
        safe = [("hermes", "Let me see.\n<tool_c", 11), ("hermes", "Let me see.\n<tool_call>\n{\"na", 11),
                ("hermes", "Hello ", 5), ("generic", "{\"tool_calls\"", 0), ("generic", "Hello ", 5)]
        self.assertEqual([_tools.stream_safe(f, x) for f, x, _ in safe], [n for _, _, n in safe])

    def with_template(self, fn):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hermes.gguf")
            t.gguf_with_key(BROWN, path, "tokenizer.chat_template", HERMES)
            with mor.Llama(model_path=path, n_ctx=256, seed=1, verbose=False) as llm:
                fn(llm)

    def test_forced_calls(self):
        msgs = [{"role": "user", "content": "What is the weather?"}]

        def run(llm):
            for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
                for seed in (1, 2):
                    kw = dict(messages=msgs, tools=TOOLS, tool_choice=choice, seed=seed, max_tokens=120,
                              parallel_tool_calls=False, temperature=1.0)
                    r = llm.create_chat_completion(**kw)
                    ch, m = r["choices"][0], r["choices"][0]["message"]
                    self.assertEqual((ch["finish_reason"], m["content"], len(m["tool_calls"])), ("tool_calls", None, 1))
                    fn = m["tool_calls"][0]["function"]
                    self.assertTrue(call_valid(fn["name"], fn["arguments"]), fn)
                    if choice != "required":
                        self.assertEqual(fn["name"], "get_time")
                    # streamed: the same call as deltas, no content
                    calls, content, finish = {}, "", None
                    for e in llm.create_chat_completion(stream=True, **kw):
                        d = e["choices"][0]["delta"]
                        content += d.get("content") or ""
                        for tc in d.get("tool_calls", []):
                            c = calls.setdefault(tc["index"], ["", ""])
                            c[0] += tc.get("function", {}).get("name", "")
                            c[1] += tc.get("function", {}).get("arguments", "")
                        finish = e["choices"][0]["finish_reason"] or finish
                    self.assertEqual((content, finish, list(calls.values())),
                                     ("", "tool_calls", [[fn["name"], fn["arguments"]]]))
            # a tool result sent back: rendered (arguments as the object), and the reply follows
            conv = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
            r = llm.create_chat_completion(messages=conv, tools=TOOLS, max_tokens=6, seed=1)
            self.assertEqual(r["choices"][0]["message"]["role"], "assistant")
            self.assertGreater(r["usage"]["prompt_tokens"], 20)
        self.with_template(run)

    def test_auto_and_legacy(self):
        msgs = [{"role": "user", "content": "What is the weather?"}]

        def run(llm):
            for seed in (1, 2, 3):   # no call begun: the lazy grammar leaves the text free, as none does
                kw = dict(messages=msgs, tools=TOOLS, seed=seed, max_tokens=30, temperature=1.0)
                a = llm.create_chat_completion(tool_choice="auto", **kw)["choices"][0]
                n = llm.create_chat_completion(tool_choice="none", **kw)["choices"][0]
                self.assertNotIn("<tool_call>", n["message"]["content"])
                self.assertEqual((a["message"], a["finish_reason"]), (n["message"], n["finish_reason"]))
            # functions / function_call: OpenAI's older spelling of tools / tool_choice
            fs = [tl["function"] for tl in TOOLS]
            r = llm.create_chat_completion(messages=msgs, functions=fs, function_call={"name": "get_time"}, seed=1,
                                           max_tokens=120, parallel_tool_calls=False)
            fn = r["choices"][0]["message"]["tool_calls"][0]["function"]
            self.assertEqual(fn["name"], "get_time")
            self.assertTrue(call_valid(fn["name"], fn["arguments"]))
            for bad in (dict(tool_choice="required"), dict(tools=TOOLS, tool_choice={"type": "function",
                                                                                     "function": {"name": "nope"}}),
                        dict(tools=[{"type": "function", "function": {"name": "has space"}}]),
                        dict(tools=TOOLS, tool_choice="required", grammar='root ::= "x"'),
                        dict(tools=TOOLS, functions=fs)):
                with self.assertRaises(ValueError):
                    llm.create_chat_completion(messages=msgs, max_tokens=4, **bad)
        self.with_template(run)
        with llama(chat_format="chatml") as llm, self.assertRaisesRegex(ValueError, "Jinja"):
            llm.create_chat_completion(messages=msgs, tools=TOOLS, max_tokens=4)


class Embeddings(unittest.TestCase):
    def test_embed(self):
        with llama(embedding=True) as llm, mor.Model(BROWN) as m, m.context(capture_hidden=True) as ctx:
            causal(m, ctx)
            ref = list(ctx.embed(m.tokenize("the jury", add_bos=True), normalize=False))
            self.assertEqual(llm.embed("the jury"), ref)
            both, n = llm.embed(["the jury", "a city"], normalize=True, return_count=True)
            self.assertEqual(len(both), 2)
            self.assertAlmostEqual(math.sqrt(sum(x * x for x in both[0])), 1.0, places=5)
            self.assertEqual(n, len(m.tokenize("the jury", add_bos=True)) + len(m.tokenize("a city", add_bos=True)))
            r = llm.create_embedding(["the jury", "a city"])
            self.assertEqual([d["index"] for d in r["data"]], [0, 1])
            self.assertEqual(r["data"][0]["embedding"], both[0])
            self.assertEqual(r["usage"], {"prompt_tokens": n, "total_tokens": n})

    def test_needs_embedding_flag(self):
        with llama() as llm:
            with self.assertRaisesRegex(RuntimeError, "embedding=True"):
                llm.embed("x")


class Errors(unittest.TestCase):
    def test_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "unsupported argument lora_path"):
            llama(lora_path="x")
        with llama(n_gpu_layers=-1, use_mlock=True) as llm:   # GPU and locking: accepted, no effect
            with self.assertRaisesRegex(ValueError, "tools"):
                llm.create_chat_completion(messages=[{"role": "user", "content": "x"}],
                                           tools=[{"type": "function", "function": {"name": "f"}}])
            with self.assertRaisesRegex(ValueError, "not one of"):
                llama(chat_format="nope")
            with self.assertRaises(mor.FormatError):
                mor.Llama(model_path=os.path.join(t.ROOT, "README.md"), verbose=False)
            with self.assertRaisesRegex(ValueError, "content"):
                llm.create_chat_completion(messages=[{"role": "user", "content": [{"type": "image_url"}]}])
            # a failed call leaves the Llama usable and its cache as it was
            self.assertEqual(llm._ctx.kv.seq_pos_max(0) + 1, len(llm._tokens))
            self.assertEqual(len(text_of(llm(PROMPT, max_tokens=3))) > 0, True)


class ReadmeScript(unittest.TestCase):
    def test_llama_cpp_python_script_runs(self):
        """The README's llama-cpp-python script, with `from mor import Llama`:
        the one line that differs from the same script for llama_cpp."""
        with open(os.path.join(t.ROOT, "bindings", "python", "README.md")) as f:
            readme = f.read()
        m = re.search(r"<!-- llama-cpp-python script -->\n```python\n(.*?)```", readme, re.S)
        self.assertIsNotNone(m, "the README marks its llama-cpp-python script")
        script = m.group(1)
        self.assertIn("from mor import Llama", script)
        other = re.sub(r'"[^"]*"', '""', script.replace("from mor import Llama", "from llama_cpp import Llama"))
        self.assertNotIn("mor", other, "only the import line names mor")
        env = dict(os.environ)
        if not t.INSTALLED:
            env["PYTHONPATH"] = os.path.join(t.ROOT, "bindings", "python")
        p = subprocess.run([sys.executable, "-c", script], cwd=t.ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreater(len(p.stdout.strip()), 0)


class Checks(unittest.TestResult):
    def addSuccess(self, test):
        t.check(True, test.id())

    def addFailure(self, test, err):
        t.check(False, "%s\n%s" % (test.id(), self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        self.addFailure(test, err)

    def addSkip(self, test, reason):
        t.skip("%s: %s" % (test.id(), reason))


if __name__ == "__main__":
    if t.INSTALLED:
        t.check(not os.path.abspath(mor.__file__).startswith(os.path.join(t.ROOT, "bindings")),
                "the installed package is tested: %s" % mor.__file__)
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    t.check(suite.countTestCases() > 15, "found %d tests" % suite.countTestCases())
    suite.run(Checks())
    t.finish()
