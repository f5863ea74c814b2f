// tests/openai_client.js - the official OpenAI Node client (npm package
// openai) against a running mor-server (MOR_URL, e.g. http://127.0.0.1:8080/v1);
// run by tests/test_server.py, which checks the JSON it prints.
const OpenAI = require("openai");

const client = new OpenAI({ baseURL: process.env.MOR_URL, apiKey: "unused", maxRetries: 0 });
const model = "brown-mor";
const prompt = "The jury said that";

// MOR_CHAT_LOGPROBS=1 (a server with a chat template): chat's logprobs only,
// whole and streamed, as the client parses them.
async function chatLogprobs() {
  const body = { model, messages: JSON.parse(process.env.MOR_MESSAGES), max_tokens: 20, seed: 4,
                 logprobs: true, top_logprobs: 3 };
  const c = await client.chat.completions.create(body);
  const out = { content: c.choices[0].logprobs.content };
  const s = await client.chat.completions.create({ ...body, stream: true });
  out.streamed = [];
  for await (const chunk of s) {
    if (chunk.choices.length && chunk.choices[0].logprobs) out.streamed.push(...chunk.choices[0].logprobs.content);
  }
  return out;
}

// MOR_TOOLS (a server with a Hermes-format template): function calling as
// the client does it: a required call, a streamed call assembled by the
// client's stream helper, the tool's result sent back and the answer.
async function chatTools() {
  const tools = JSON.parse(process.env.MOR_TOOLS);
  const messages = [{ role: "user", content: "What time is it in Paris?" }];
  const body = { model, messages, tools, tool_choice: "required", seed: 2, max_tokens: 180, parallel_tool_calls: false };
  const out = {};
  const c = await client.chat.completions.create(body);
  out.required = { message: c.choices[0].message, finish: c.choices[0].finish_reason };
  const api = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
  const s = api.stream({ ...body, tool_choice: { type: "function", function: { name: "get_time" } } });
  const final = await s.finalChatCompletion();
  out.streamed = { message: final.choices[0].message, finish: final.choices[0].finish_reason };
  // the streamed message (with the client's "refusal": null) sent back as it is
  const call = final.choices[0].message.tool_calls[0];
  const back = messages.concat([final.choices[0].message, { role: "tool", tool_call_id: call.id, content: "12:00" }]);
  const a = await client.chat.completions.create({ model, messages: back, tools, seed: 2, max_tokens: 8 });
  out.answer = { message: a.choices[0].message, finish: a.choices[0].finish_reason };
  return out;
}

(async () => {
  if (process.env.MOR_TOOLS) {
    console.log(JSON.stringify(await chatTools()));
    return;
  }
  if (process.env.MOR_CHAT_LOGPROBS) {
    console.log(JSON.stringify(await chatLogprobs()));
    return;
  }
  const out = {};
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const c = await client.completions.create({ model, prompt, max_tokens: 10, seed: 9 });
  out.text = c.choices[0].text;
  out.finish = c.choices[0].finish_reason;
  out.usage = c.usage;

  const s = await client.completions.create({ model, prompt, max_tokens: 10, seed: 9, stream: true });
  let text = "";
  const tokens = [];
  for await (const chunk of s) {
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].text;
    if (chunk.choices[0].mor) tokens.push(...chunk.choices[0].mor.token_ids);
  }
  out.streamed = text;
  out.stream_tokens = tokens;

  const lp = await client.completions.create({ model, prompt, max_tokens: 10, seed: 9, logprobs: 3 });
  out.logprobs = lp.choices[0].logprobs;
  const ls = await client.completions.create({ model, prompt, max_tokens: 10, seed: 9, logprobs: 3, stream: true });
  out.stream_logprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of ls) {
    const l = chunk.choices.length && chunk.choices[0].logprobs;
    if (l) for (const k of Object.keys(out.stream_logprobs)) out.stream_logprobs[k].push(...l[k]);
  }

  try {
    await client.completions.create({ model, prompt: "x", temperature: 5 });
  } catch (e) {
    out.bad_status = e.status;
    out.bad_param = e.param;
  }
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] });
  } catch (e) {
    out.chat_status = e.status;
  }

  // n > 1: the choices in index order
  const nc = await client.completions.create({ model, prompt, max_tokens: 5, seed: 9, n: 2 });
  out.n_texts = nc.choices.map((c) => [c.index, c.text]);

  // embeddings: the client asks for base64 and decodes it to floats
  const e = await client.embeddings.create({ model, input: [prompt, "In the morning"] });
  out.embeddings = e.data.map((d) => Array.from(d.embedding));
  out.embed_usage = e.usage;

  // structured output: response_format json_schema, as OpenAI's clients send it
  const schema = { type: "object", properties: { name: { type: "string", maxLength: 10 }, n: { type: "integer" } },
                   required: ["name", "n"], additionalProperties: false };
  const so = await client.completions.create({ model, prompt: "Record:", max_tokens: 120, seed: 2,
    response_format: { type: "json_schema", json_schema: { name: "rec", schema, strict: true } } });
  out.structured = [so.choices[0].text, so.choices[0].finish_reason];

  // leaving a stream early aborts its request (seed 3: 200 tokens, no end of
  // text among them, so there are 3 chunks to read whatever the speed)
  const long = await client.completions.create({ model, prompt, max_tokens: 200, seed: 3, stream: true });
  let n = 0;
  for await (const chunk of long) {
    if (++n === 3) break;
  }
  out.abort_ok = n === 3;
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
