// Structured output, tool calling and reasoning through OpenAI's official
// Node SDK. Run by server/node_structured_test.go against a server using
// Qwen3's chat template (GOSLING_SUITE=qwen3: everything), or Llama 3.1's or
// Mistral's tool template (GOSLING_SUITE=tools: the tool calls); exits
// non-zero on any mismatch. GOSLING_CALL_ID is the pattern of call ids.
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.GOSLING_BASE_URL;
const model = process.env.GOSLING_MODEL;
const suite = process.env.GOSLING_SUITE ?? "qwen3";
const callID = new RegExp(process.env.GOSLING_CALL_ID ?? "^call_[0-9a-f]{32}$");
assert.ok(baseURL && model, "set GOSLING_BASE_URL and GOSLING_MODEL");
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const messages = [{ role: "user", content: "Who is Lily?" }];

// response_format json_schema: the reply parses and meets the schema.
const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 10 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    pet: { enum: ["cat", "dog", "fish"] },
  },
  required: ["name", "age", "pet"],
  additionalProperties: false,
};
function checkPerson(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ["age", "name", "pet"]);
  assert.ok(typeof v.name === "string" && [...v.name].length <= 10, `name ${v.name}`);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, `age ${v.age}`);
  assert.ok(["cat", "dog", "fish"].includes(v.pet), `pet ${v.pet}`);
}
for (const temperature of suite === "qwen3" ? [0, 1] : []) {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 300, temperature, seed: 4,
    response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, "stop");
  checkPerson(r.choices[0].message.content);
}

// Tools: required and named calls, plain and streamed.
const weather = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", parameters: weather } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string", maxLength: 16 } }, required: ["zone"], additionalProperties: false } } },
];
function checkCall(call) {
  assert.equal(call.type, "function");
  assert.match(call.id, callID);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === "get_weather") {
    assert.ok([...args.city].length <= 12 && ["celsius", "fahrenheit"].includes(args.unit), call.function.arguments);
  } else {
    assert.equal(call.function.name, "get_time");
    assert.ok(typeof args.zone === "string" && [...args.zone].length <= 16, call.function.arguments);
  }
}
for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }]) {
  const req = { model, messages, tools, tool_choice, parallel_tool_calls: false, max_tokens: 400, temperature: 1, seed: 2 };
  const r = await client.chat.completions.create(req);
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.tool_calls.length, 1);
  msg.tool_calls.forEach(checkCall);
  if (typeof tool_choice === "object") assert.equal(msg.tool_calls[0].function.name, "get_weather");

  // Streamed: rebuild the calls from the deltas as OpenAI clients do.
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const calls = [];
  const pieces = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const d of c.delta.tool_calls ?? []) {
        // The first delta of a call has its id, type and name; the next
        // ones only pieces of its arguments.
        const first = calls[d.index] === undefined;
        assert.equal(first, d.id !== undefined, JSON.stringify(d));
        assert.equal(first, d.function?.name !== undefined, JSON.stringify(d));
        pieces[d.index] = (pieces[d.index] ?? 0) + 1;
        calls[d.index] ??= { id: d.id, type: d.type, function: { name: "", arguments: "" } };
        calls[d.index].function.name += d.function?.name ?? "";
        calls[d.index].function.arguments += d.function?.arguments ?? "";
      }
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(finish, "tool_calls");
  assert.ok(pieces.every((n) => n >= 3), `deltas per call: ${pieces}`);
  assert.deepEqual(calls.map((c) => c.function), msg.tool_calls.map((c) => c.function));
  calls.forEach(checkCall);
}
// Two calls in one reply (stories260K may run to its budget with the last
// call cut short: the complete calls count).
let most = 0;
for (let seed = 0; seed < 12 && most < 2; seed++) {
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: "required", parallel_tool_calls: true, max_tokens: 1000, temperature: 1, seed,
  });
  const calls = r.choices[0].message.tool_calls ?? [];
  calls.forEach(checkCall);
  most = Math.max(most, calls.length);
}
assert.ok(most >= 2, `no seed of 12 gave two parallel calls (at most ${most})`);

// reasoning_content: a reply that thinks first (forced by a regex) is split,
// plain and streamed alike.
if (suite === "qwen3") {
  const req = {
    model, max_tokens: 80, temperature: 0, messages: [{ role: "user", content: "Think, then answer." }],
    regex: "<think>\\n[a-z]{2,8}( [a-z]{2,8}){1,3}\\n</think>\\n\\n[A-Z][a-z]{2,8}\\.",
    chat_template_kwargs: { enable_thinking: true },
  };
  const r = await client.chat.completions.create(req);
  const msg = r.choices[0].message;
  assert.ok(msg.reasoning_content && !msg.reasoning_content.includes("think>"), JSON.stringify(msg));
  assert.ok(msg.content && !msg.content.includes("think>"), JSON.stringify(msg));
  let reasoning = "", content = "";
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    for (const c of chunk.choices) {
      reasoning += c.delta.reasoning_content ?? "";
      content += c.delta.content ?? "";
    }
  }
  assert.equal(reasoning, msg.reasoning_content);
  assert.equal(content, msg.content);
}
console.log(`node structured-output and tool-call checks passed (${suite})`);
