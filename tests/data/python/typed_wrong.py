"""typed_wrong.py - mistakes mypy must reject through mor's stubs: each line
whose comment is "E: text" must get an error containing text, and no other
line any (tests/test_python_types.py)."""
import mor
from mor import Llama

llm = Llama(model_path="model.gguf")
llm("x")["choices"][0]["txt"]  # E: TypedDict "CompletionChoice" has no key "txt"
llm("x", max_tokens="8")  # E: No overload variant of "__call__" of "Llama" matches argument types "str", "str"
for chunk in llm.create_chat_completion(messages=[], stream=True):
    chunk["choices"][0]["message"]  # E: TypedDict "ChatCompletionStreamResponseChoice" has no key "message"
n: int = llm.create_completion("x")["usage"]["prompt_token"]  # E: TypedDict "CompletionUsage" has no key "prompt_token"
s: str = llm.create_completion("x", stream=True)  # E: Incompatible types in assignment
Llama(model_path="m.gguf", n_gpus=1)  # E: Unexpected keyword argument "n_gpus" for "Llama"
model = mor.Model("model.gguf")
model.token_to_piece("a")  # E: Argument 1 to "token_to_piece" of "Model" has incompatible type "str"; expected "int"
model.n_vocab()  # E: "int" not callable
ctx = model.context(n_ctx="512")  # E: Argument "n_ctx" to "context" of "Model" has incompatible type "str"
ctx.logits(0).shape  # E: "array[float]" has no attribute "shape"
for tok in model.generate("x"):
    tok.txt  # E: "Token" has no attribute "txt"
mor.Sampler(temperature="hot")  # E: Argument "temperature" to "Sampler" has incompatible type "str"
