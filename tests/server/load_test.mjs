// dsa serve under load through the official OpenAI Node client: N concurrent clients (default
// 64), half /v1/completions and half /v1/chat/completions, each sending one streamed request and
// its non-streamed twin (same body; half the clients send the twin first), with max_tokens drawn
// from {4, 8, 12, 16, 24}, varied prompts, mostly greedy plus some seeded sampled requests and a
// few stop strings. A few clients stream with raw fetch() instead of the client, to check the SSE
// framing itself. Checks:
//   - every request completes (finish_reason stop or length); every id is unique; each stream has
//     one id, one chunk with a finish_reason, one usage chunk (last) iff include_usage, and (raw
//     streams) exactly one `data: [DONE]`, at the end;
//   - each stream's text, finish_reason and usage equal its twin's (greedy and seeded sampling are
//     deterministic in dsa, whatever the batch);
//   - usage: completion_tokens = max_tokens when the finish is length, <= max_tokens otherwise,
//     total = prompt + completion; summed over all requests, prompt and completion tokens equal the
//     growth of dsa:prompt_tokens_total and dsa:generation_tokens_total, and the requests the
//     growth of dsa:num_requests_total (none aborted or failed);
//   - afterwards /metrics shows no request running or waiting and dsa:kv_pages_free back to its
//     value before the load.
// Prints one JSON summary line (throughput, TTFT and end-to-end percentiles, measured here).
// Exit 1 on any failure, each named on a FAIL line.
// Usage: node load_test.mjs BASE_URL [CLIENTS]   (BASE_URL = http://127.0.0.1:PORT/v1)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.argv[2];
const numClients = Number(process.argv[3] ?? 64);
if (!baseURL || !Number.isInteger(numClients) || numClients < 1) {
  console.error('usage: node load_test.mjs BASE_URL [CLIENTS]');
  process.exit(2);
}
const root = baseURL.replace(/\/v1\/?$/, '');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300_000 });

// Anything thrown outside a client's requests (the server gone, /metrics unreadable) ends the run.
process.on('uncaughtException', (e) => {
  console.log(`FAIL ${e.message}${e.cause ? ` (${e.cause.message ?? e.cause})` : ''}`);
  console.log('load test: FAILED');
  process.exit(1);
});

const failures = [];
function fail(what) {
  failures.push(what);
  console.log(`FAIL ${what}`);
}

// --- /metrics ------------------------------------------------------------------------------------
async function metrics() {
  const res = await fetch(`${root}/metrics`).catch((e) => {
    throw new Error(`GET /metrics: ${e.message}`, { cause: e.cause });
  });
  assert.equal(res.status, 200, `/metrics answered ${res.status}`);
  const values = new Map();
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('dsa:')) continue;
    const cut = line.lastIndexOf(' ');
    values.set(line.slice(0, cut), Number(line.slice(cut + 1)));
  }
  return values;
}
function metric(m, name) {
  if (!m.has(name)) throw new Error(`/metrics lacks ${name}`);
  return m.get(name);
}
const finishCounter = (r) => `dsa:num_requests_total{finish_reason="${r}"}`;

// --- the requests --------------------------------------------------------------------------------
const prompts = [
  'And the king',
  'In the beginning',
  'Then the people of the city went out to meet him, and',
  'Hello',
  'The word of the Lord came unto',
  'And it came to pass in those days, when the judges ruled, that there was a famine in the land',
  'Once upon a time',
  'Behold,',
  'And he said unto them, Go ye into all the world, and',
  'The sea',
  'Now these are the names of the children of Israel, which came into Egypt; every man and his ' +
    'household came with Jacob. Reuben, Simeon, Levi, and Judah, Issachar, Zebulun, and',
  'Blessed is the man that walketh not in the counsel of the ungodly',
  'Tell me a story',
  'What is the name of the river',
];
const maxTokensMix = [4, 8, 12, 16, 24];

function plan(i) {
  const chat = i % 2 === 1;
  const p = {
    max_tokens: maxTokensMix[i % maxTokensMix.length],
    temperature: 0,
  };
  if (i % 8 === 3 || i % 8 === 6) {  // a quarter sampled, each with its own seed
    Object.assign(p, { temperature: 0.8, top_p: 0.95, seed: 1000 + i });
    if (i % 16 === 6) p.top_k = 40;
  }
  if (i % 16 === 9) p.stop = [' the', '.'];
  const includeUsage = i % 7 !== 0;
  let text = prompts[i % prompts.length];
  if (i >= prompts.length) text += ` ${['and', 'of the', 'unto'][i % 3]}`;
  if (chat) {
    p.messages = i % 4 === 1 ? [{ role: 'system', content: 'Answer briefly.' },
                                { role: 'user', content: text }]
                             : [{ role: 'user', content: text }];
  } else {
    p.prompt = text;
  }
  return {
    i, chat, params: p, includeUsage,
    raw: i % 16 < 2 && i < 32,  // clients 0, 1, 16, 17: streamed by raw fetch()
    streamFirst: Math.floor(i / 2) % 2 === 0,
  };
}

const percentile = (xs, q) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
};
const round = (x, d = 3) => (x === null ? null : Number(x.toFixed(d)));
const now = () => performance.now() / 1000;

// One streamed chunk (library or raw), folded into the stream's result.
function take(r, job, chunk, t) {
  r.chunks++;
  r.ids.add(chunk.id);
  const object = job.chat ? 'chat.completion.chunk' : 'text_completion';
  if (chunk.object !== object) r.errors.push(`chunk object ${chunk.object}`);
  if (chunk.usage) {
    r.usageChunks++;
    r.usage = chunk.usage;
    if (chunk.choices.length !== 0) r.errors.push('the usage chunk has choices');
  }
  if (r.chunks === 1 && job.chat && chunk.choices[0]?.delta?.role !== 'assistant') {
    r.errors.push(`the first chat chunk is not the assistant role: ${JSON.stringify(chunk)}`);
  }
  for (const c of chunk.choices) {
    if (r.finals > 0) r.errors.push('a choice after the final chunk');
    const piece = job.chat ? (c.delta?.content ?? '') : (c.text ?? '');
    if (piece.length > 0 && r.ttft === null) r.ttft = t - r.start;
    r.text += piece;
    if (c.finish_reason) {
      r.finals++;
      r.finish = c.finish_reason;
    }
  }
  if (r.usageChunks > 0 && !chunk.usage) r.errors.push('a chunk after the usage chunk');
}

function newStreamResult() {
  return { text: '', ids: new Set(), chunks: 0, finals: 0, usageChunks: 0, usage: null,
           finish: null, ttft: null, start: now(), e2e: null, errors: [], dones: null };
}

function body(job, stream) {
  const b = { model, ...job.params };
  if (stream) {
    b.stream = true;
    if (job.includeUsage) b.stream_options = { include_usage: true };
  }
  return b;
}

async function streamed(job) {
  const r = newStreamResult();
  if (job.raw) {
    const route = job.chat ? 'chat/completions' : 'completions';
    const res = await fetch(`${baseURL}/${route}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body(job, true)),
    });
    if (res.status !== 200) throw new Error(`raw stream: HTTP ${res.status}: ${await res.text()}`);
    if (!/^text\/event-stream/.test(res.headers.get('content-type') ?? '')) {
      r.errors.push(`content-type ${res.headers.get('content-type')}`);
    }
    const decoder = new TextDecoder();
    let all = '', pending = '';
    r.dones = 0;
    for await (const bytes of res.body) {
      const t = now();
      const s = decoder.decode(bytes, { stream: true });
      all += s;
      pending += s;
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (line === '' || line.startsWith(':')) continue;  // event end, keep-alive comment
        if (!line.startsWith('data: ')) {
          r.errors.push(`not an SSE data line: ${line.slice(0, 80)}`);
          continue;
        }
        const data = line.slice(6);
        if (r.dones > 0) r.errors.push(`data after [DONE]: ${data.slice(0, 80)}`);
        if (data === '[DONE]') {
          r.dones++;
        } else {
          take(r, job, JSON.parse(data), t);
        }
      }
    }
    if (r.dones !== 1) r.errors.push(`${r.dones} [DONE] events`);
    if (!all.endsWith('data: [DONE]\n\n')) {
      r.errors.push(`the stream does not end with data: [DONE]: ...${JSON.stringify(all.slice(-60))}`);
    }
  } else {
    const create = job.chat ? client.chat.completions : client.completions;
    const stream = await create.create(body(job, true));
    for await (const chunk of stream) take(r, job, chunk, now());
  }
  r.e2e = now() - r.start;
  return r;
}

async function whole(job) {
  const start = now();
  const create = job.chat ? client.chat.completions : client.completions;
  const w = await create.create(body(job, false));
  const c = w.choices[0];
  return {
    id: w.id, object: w.object, choices: w.choices.length, usage: w.usage,
    text: job.chat ? c.message.content : c.text, finish: c.finish_reason,
    role: job.chat ? c.message.role : null, e2e: now() - start,
  };
}

async function runClient(job) {
  if (job.streamFirst) {
    job.stream = await streamed(job);
    job.whole = await whole(job);
  } else {
    job.whole = await whole(job);
    job.stream = await streamed(job);
  }
}

function checkClient(job) {
  const name = `client ${job.i} (${job.chat ? 'chat' : 'completion'}${job.raw ? ', raw' : ''}, ` +
               `${JSON.stringify(job.params)})`;
  const s = job.stream, w = job.whole;
  const errors = [...s.errors];
  const finishes = ['stop', 'length'];
  if (s.ids.size !== 1) errors.push(`stream ids ${[...s.ids]}`);
  if (s.finals !== 1) errors.push(`${s.finals} chunks with a finish_reason`);
  if (!finishes.includes(s.finish)) errors.push(`stream finish ${s.finish}`);
  if (s.usageChunks !== (job.includeUsage ? 1 : 0)) errors.push(`${s.usageChunks} usage chunks`);
  if (!finishes.includes(w.finish)) errors.push(`whole finish ${w.finish}`);
  if (w.object !== (job.chat ? 'chat.completion' : 'text_completion')) errors.push(w.object);
  if (w.choices !== 1) errors.push(`${w.choices} choices`);
  if (job.chat && w.role !== 'assistant') errors.push(`role ${w.role}`);
  const prefix = job.chat ? 'chatcmpl-' : 'cmpl-';
  if (!w.id.startsWith(prefix) || !s.ids.values().next().value?.startsWith(prefix)) {
    errors.push(`ids ${w.id}, ${[...s.ids]}`);
  }
  if (s.text !== w.text) {
    errors.push(`streamed text ${JSON.stringify(s.text)} != whole ${JSON.stringify(w.text)}`);
  }
  if (s.finish !== w.finish) errors.push(`finish: streamed ${s.finish}, whole ${w.finish}`);
  const u = w.usage, max = job.params.max_tokens;
  if (!u || u.total_tokens !== u.prompt_tokens + u.completion_tokens || u.prompt_tokens < 1) {
    errors.push(`whole usage ${JSON.stringify(u)}`);
  } else if (w.finish === 'length' ? u.completion_tokens !== max
                                   : !(u.completion_tokens >= 1 && u.completion_tokens <= max)) {
    errors.push(`completion_tokens ${u.completion_tokens} with finish ${w.finish}, max ${max}`);
  }
  if (job.includeUsage) {
    try {
      assert.deepEqual(s.usage, u);
    } catch {
      errors.push(`streamed usage ${JSON.stringify(s.usage)} != whole ${JSON.stringify(u)}`);
    }
  }
  for (const e of errors) fail(`${name}: ${e}`);
  return errors.length === 0;
}

// --- main ----------------------------------------------------------------------------------------
let model;
try {
  model = (await client.models.list()).data[0].id;
} catch (e) {
  console.log(`FAIL GET /v1/models: ${e}`);
  process.exit(1);
}
const before = await metrics();
const jobs = Array.from({ length: numClients }, (_, i) => plan(i));
const t0 = now();
const outcomes = await Promise.allSettled(jobs.map(runClient));
const wall = now() - t0;

let good = 0;
const ids = new Set();
let completionTokens = 0, promptTokens = 0;
const finishes = { stop: 0, length: 0 };
outcomes.forEach((o, i) => {
  const job = jobs[i];
  if (o.status === 'rejected') {
    fail(`client ${i}: ${o.reason?.stack ?? o.reason}`);
    return;
  }
  if (checkClient(job)) good++;
  for (const id of [job.whole.id, ...job.stream.ids]) {
    if (ids.has(id)) fail(`id ${id} seen twice`);
    ids.add(id);
  }
  for (const u of [job.whole.usage, job.stream.usage ?? job.whole.usage]) {
    completionTokens += u?.completion_tokens ?? 0;
    promptTokens += u?.prompt_tokens ?? 0;
  }
  for (const f of [job.whole.finish, job.stream.finish]) if (f in finishes) finishes[f]++;
});
const requests = 2 * numClients;

// The server after the load: nothing running or waiting, every KV page back. The engine thread
// releases finished requests and updates the gauges after the step that finished them, so this
// may lag the last response by a step.
let after;
for (let k = 0; k < 100; k++) {
  after = await metrics();
  if (metric(after, 'dsa:num_requests_running') === 0 &&
      metric(after, 'dsa:num_requests_waiting') === 0 &&
      metric(after, 'dsa:kv_pages_free') === metric(before, 'dsa:kv_pages_free')) {
    break;
  }
  await new Promise((ok) => setTimeout(ok, 100));
}
for (const [name, want] of [['dsa:num_requests_running', 0], ['dsa:num_requests_waiting', 0],
                            ['dsa:kv_pages_free', metric(before, 'dsa:kv_pages_free')]]) {
  if (metric(after, name) !== want) fail(`after the load ${name} = ${metric(after, name)}, not ${want}`);
}
const grew = (name) => metric(after, name) - metric(before, name);
if (failures.length === 0) {  // the totals only add up when every request came back
  const totals = [
    ['dsa:generation_tokens_total', completionTokens],
    ['dsa:prompt_tokens_total', promptTokens],
    [finishCounter('length'), finishes.length],
    [finishCounter('stop'), finishes.stop],
    [finishCounter('abort'), 0],
    [finishCounter('error'), 0],
  ];
  for (const [name, want] of totals) {
    if (grew(name) !== want) fail(`${name} grew by ${grew(name)}, not ${want}`);
  }
}

const streams = jobs.filter((j) => j.stream);
const ttfts = streams.map((j) => j.stream.ttft).filter((t) => t !== null);
const e2es = streams.map((j) => j.stream.e2e);
const wholeE2es = jobs.filter((j) => j.whole).map((j) => j.whole.e2e);
const summary = {
  clients: numClients,
  requests,
  streamed: streams.length,
  raw_streams: jobs.filter((j) => j.raw).length,
  ok_clients: good,
  completion_tokens: completionTokens,
  prompt_tokens: promptTokens,
  finish: finishes,
  wall_s: round(wall),
  completion_tokens_per_s: round(completionTokens / wall, 1),
  requests_per_s: round(requests / wall, 2),
  ttft_p50_s: round(percentile(ttfts, 0.5)),
  ttft_p99_s: round(percentile(ttfts, 0.99)),
  e2e_p50_s: round(percentile(e2es, 0.5)),
  e2e_p99_s: round(percentile(e2es, 0.99)),
  whole_e2e_p50_s: round(percentile(wholeE2es, 0.5)),
  whole_e2e_p99_s: round(percentile(wholeE2es, 0.99)),
  spec_accept_length: round(metric(after, 'dsa:spec_accept_length')),
  failures: failures.length,
};
console.log(JSON.stringify(summary));
if (failures.length) {
  console.log(`load test: FAILED (${failures.length} failures, ${good} of ${numClients} clients ok)`);
  process.exit(1);
}
console.log(`load test: ${numClients} clients, ${requests} requests, all checks passed`);
