"""typed_usage.py - typed code on mor's public API; mypy --strict must accept
it (tests/test_python_types.py), with NumPy installed and without. It also
runs: python3 typed_usage.py MODEL.gguf (the test runs it on brown-mor.gguf)."""
import array
import sys
from typing import TYPE_CHECKING, Iterator, List, Optional, Tuple

import mor
from mor import Llama, LlamaGrammar

if TYPE_CHECKING:   # type-only names of the stubs (TypedDicts)
    from mor.llama import CreateChatCompletionStreamResponse, CreateCompletionResponse


def core(path: str) -> Tuple[List[int], int]:
    with mor.Model(path) as model:
        n_vocab: int = model.n_vocab
        arch: Optional[str] = model.meta("general.architecture", None)
        ids: List[int] = model.tokenize("The jury said that", add_bos=True)
        text: bytes = model.detokenize(ids)
        toks = [tok.id for tok in model.generate(ids, max_tokens=4, temperature=0.0, seed=1)]
        pieces = "".join(tok.text or "" for tok in model.generate("The jury", max_tokens=2))
        with model.context(n_ctx=128, n_seq_max=3, n_threads=1, capture_hidden=True) as ctx:
            ctx.router.set_threshold(0, 0.5)
            row: int = ctx.decode_tokens(ids)
            logits: "array.array[float]" = ctx.logits(row)
            view = ctx.logits(row, numpy=mor.have_numpy())
            best: float = max(float(x) for x in view)
            with mor.Sampler(seed=1, temperature=0.7, top_k=40) as s:
                t1: int = s.sample((ctx, row))
                t2: int = mor.Sampler.greedy().sample(logits)
            lp: mor.Logprobs = mor.logprobs(logits, token=t2, top=3)
            top: List[Tuple[int, float]] = lp.top
            depths: List[int] = ctx.router.depths()
            allocated, used = ctx.kv.bytes(mor.KV_ALL)
            stats: mor.RouterStats = ctx.router.stats()
            emb = ctx.embed(ids[:4], seq=1, numpy=False)
            for tok in ctx.generate(ids[:1], max_tokens=2, seq=2, temperature=0.0):
                depths.append(tok.depth)
        assert n_vocab > 0 and len(text) > 0 and len(emb) > 0 and best >= logits[t2] - 1e9
        assert (arch is None or arch) and pieces is not None and t1 >= 0 and top and stats.n_tokens >= 0
        return toks, allocated + used


def first_text(out: "CreateCompletionResponse") -> str:
    return out["choices"][0]["text"]


def llama(path: str) -> None:
    llm = Llama(model_path=path, n_ctx=256, seed=1, verbose=False, n_gpu_layers=-1, routing="threshold")
    out = llm("The jury said that", max_tokens=8, stop=["."], echo=True, temperature=0.0)
    text: str = first_text(out)
    finish: str = out["choices"][0]["finish_reason"]
    ids: List[int] = out["choices"][0]["mor"]["token_ids"]
    total: int = out["usage"]["total_tokens"]
    lp = llm.create_completion("The jury", max_tokens=2, logprobs=2)["choices"][0]["logprobs"]
    offsets: List[int] = lp["text_offset"] if lp is not None else []
    for chunk in llm("The jury", max_tokens=4, stream=True):
        text += chunk["choices"][0]["text"]
    messages = [{"role": "system", "content": "You are a court reporter."},
                {"role": "user", "content": "What did the jury say?"}]
    resp = llm.create_chat_completion(messages=messages, max_tokens=8, temperature=0.7,
                                      response_format={"type": "json_object"})
    answer: str = resp["choices"][0]["message"]["content"] or ""   # None: only tool calls
    stream: Iterator["CreateChatCompletionStreamResponse"] = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True)
    for c in stream:
        answer += c["choices"][0]["delta"].get("content", "")
    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    yes_no: str = llm("Answer:", grammar=g, max_tokens=4)["choices"][0]["text"]
    llm.close()
    with Llama(model_path=path, embedding=True, verbose=False) as emb:
        one: List[float] = emb.embed("The jury")
        many, count = emb.embed(["a", "b"], normalize=True, return_count=True)
        data = emb.create_embedding("The jury")["data"][0]["embedding"]
        assert len(one) == len(many[0]) == len(data) and count > 0
    assert text and finish in ("stop", "length") and ids and total > 0 and answer is not None
    assert yes_no in ("yes", "no") and isinstance(offsets, list)


if __name__ == "__main__":
    core(sys.argv[1])
    llama(sys.argv[1])
    print("typed_usage: ok")
