// dsa serve through the official OpenAI Node client: completions and chat, whole and streamed,
// the response fields a client reads, and errors surfacing as the client's typed errors.
// Usage: node openai_client_test.mjs http://127.0.0.1:PORT/v1 (run by server_test.sh).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.argv[2];
assert.ok(baseURL, 'usage: node openai_client_test.mjs BASE_URL');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const checks = [];
function check(name, fn) { checks.push([name, fn]); }

let model;
check('models.list', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  model = list.data[0].id;
  assert.equal(list.data[0].object, 'model');
});

check('completions.create', async () => {
  const r = await client.completions.create({
    model, prompt: 'And the king', max_tokens: 12, temperature: 0,
  });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, model);
  assert.ok(Number.isInteger(r.created));
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  return r.choices[0].text;
});

check('completions.create stream (same text, usage chunk)', async () => {
  const whole = await client.completions.create({
    model, prompt: 'And the king', max_tokens: 12, temperature: 0,
  });
  const stream = await client.completions.create({
    model, prompt: 'And the king', max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(ids.size, 1);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model, max_tokens: 10, temperature: 0,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
  });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 10);
});

check('chat.completions.create stream (role first, content deltas, finish)', async () => {
  const messages = [{ role: 'user', content: [{ type: 'text', text: 'Tell me a story' }] }];
  const whole = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, seed: 5,
  });
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, seed: 5, stream: true,
  });
  let n = 0, text = '', role = null, finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (n++ === 0) role = chunk.choices[0].delta.role;
    const c = chunk.choices[0];
    if (c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
});

check('a stop string ends the text before it', async () => {
  const r = await client.completions.create({
    model, prompt: 'And the king', max_tokens: 30, temperature: 0, stop: [' of'],
  });
  assert.ok(!r.choices[0].text.includes(' of'), r.choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

check('bad values are typed client errors naming the field', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', top_p: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'top_p');
  await assert.rejects(
    client.chat.completions.create({ model, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', n: 2 }),
    (e) => e.status === 400 && /n = 1/.test(e.message));
});

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
console.log(`openai client: ${checks.length - failed} of ${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
