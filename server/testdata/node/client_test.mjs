// OpenAI's official Node SDK against a running gosling server.
// Run by server/node_client_test.go with GOSLING_BASE_URL and GOSLING_MODEL
// set; exits non-zero (with the failed assertion on stderr) on any mismatch.
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.GOSLING_BASE_URL;
const model = process.env.GOSLING_MODEL;
assert.ok(baseURL && model, "set GOSLING_BASE_URL and GOSLING_MODEL");
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30_000 });
const messages = [{ role: "user", content: "Once upon a time" }];

// models
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model]);
assert.equal(models.data[0].owned_by, "gosling");

// chat
const chat = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices.length, 1);
assert.equal(chat.choices[0].message.role, "assistant");
assert.ok(chat.choices[0].message.content.length > 0, "empty chat content");
assert.equal(chat.usage.completion_tokens, 20);
assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);

// streaming chat: the deltas spell the greedy answer, then usage comes last
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = "";
let finish = null;
let usage = null;
for await (const chunk of stream) {
  assert.equal(chunk.object, "chat.completion.chunk");
  if (chunk.usage) {
    assert.equal(chunk.choices.length, 0);
    usage = chunk.usage;
  }
  for (const c of chunk.choices) {
    streamed += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
}
assert.equal(streamed, chat.choices[0].message.content);
assert.equal(finish, chat.choices[0].finish_reason);
assert.deepEqual(
  [usage.prompt_tokens, usage.completion_tokens],
  [chat.usage.prompt_tokens, chat.usage.completion_tokens],
);

// completion, plain and streamed
const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
assert.equal(completion.object, "text_completion");
assert.ok(completion.choices[0].text.length > 0, "empty completion");
assert.equal(completion.usage.completion_tokens, 12);
const cstream = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0, stream: true });
let ctext = "";
for await (const chunk of cstream) {
  for (const c of chunk.choices) ctext += c.text;
}
assert.equal(ctext, completion.choices[0].text);

// errors come back as APIError with the status and OpenAI's error body
await assert.rejects(
  client.chat.completions.create({ model, messages: [], max_tokens: 5 }),
  (err) => err instanceof OpenAI.APIError && err.status === 400 && err.param === "messages",
);
await assert.rejects(
  client.chat.completions.create({ model: "no-such-model", messages }),
  (err) => err instanceof OpenAI.NotFoundError && err.code === "model_not_found",
);

console.log("node client: ok");
