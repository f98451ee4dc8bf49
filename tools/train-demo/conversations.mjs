// The demo model's tasks as chat requests (the request format of ../shared/golden/k3-chat/README.md)
// with the assistant turn the model is trained to write. Shared by make-data.mjs (training data)
// and eval.mjs (held-out checks through the engine), so both draw the same kinds of conversation.
//
//   raw   "12+34=" -> "046" <|end_of_msg|>                                  (the old demo task)
//   chat  a sum asked in words -> reasoning "12+34=46", response "46"
//   call  an `add` tool declared -> reasoning "Use add.", a call add(a=12, b=34)
//   tool  the call's result in history -> reasoning "add gave 46.", response "46" (the tool's number)
//   other anything else -> reasoning "OK.", response "OK."

export const HELD_OUT = 200;

/** A small seeded generator (mulberry32): the same data for the same seed. */
export function rng(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)], chance: (p) => next() < p };
}

/** Number pairs 0..99 split by the seed: [train, held] (the held pairs are never trained on). */
export function splitPairs(seed) {
  const all = [];
  for (let a = 0; a < 100; a++) for (let b = 0; b < 100; b++) all.push([a, b]);
  const r = rng(seed);
  for (let i = all.length - 1; i > 0; i--) {
    const j = r.int(i + 1);
    [all[i], all[j]] = [all[j], all[i]];
  }
  return [all.slice(HELD_OUT), all.slice(0, HELD_OUT)];
}

const pad = (n, w) => String(n).padStart(w, '0');
export const rawPrompt = (a, b) => `${pad(a, 2)}+${pad(b, 2)}=`;
export const rawAnswer = (a, b) => pad(a + b, 3);

const ASK = [
  (a, b) => `${a}+${b}=`,
  (a, b) => `${a}+${b}`,
  (a, b) => `What is ${a}+${b}?`,
  (a, b) => `What is ${a} + ${b}?`,
  (a, b) => `Add ${a} and ${b}.`,
  (a, b) => `${a} + ${b} = ?`,
  (a, b) => `What's ${a} plus ${b}?`,
  (a, b) => `Please add ${a} and ${b}.`,
  (a, b) => `Compute ${a}+${b}.`,
  (a, b) => `What is the sum of ${a} and ${b}?`,
];
const SYSTEMS = ['You are a helpful assistant.', 'You are a calculator.', 'Be concise.', 'Answer briefly.', 'You are Kimi, an AI assistant.'];

const WORDS = `the a of and to in is it you that he was for on are with as his they be at one have this from or had by
hot word but what some we can out other were all there when up use your how said an each she which do their time if will way
about many then them write would like so these her long make thing see him two has look more day could go come did number sound
no most people my over know water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very through just form sentence great
think say help low line differ turn cause much mean before move right boy old too same tell does set three want air well also
play small end put home read hand port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never last let thought city tree cross
farm hard start might story saw far sea draw left late run while press close night real life few north open seem together next white
children begin got walk example ease paper group always music those both mark often letter until mile river car feet care second
book carry took science eat room friend began idea fish mountain stop once base hear horse cut sure watch color face wood main enough
plain girl usual young ready above ever red list though feel talk bird soon body dog family direct pose leave song measure door
product black short numeral class wind question happen complete ship area half rock order fire south problem piece told knew pass
since top whole king space heard best hour better true during hundred five remember step early hold west ground interest reach fast
verb sing listen six table travel less morning ten simple several vowel toward war lay against pattern slow center love person money
serve appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait
plan figure star box noun field rest correct able pound done beauty drive stood contain front teach week final gave green oh quick
develop ocean warm free minute strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full
force blue object decide surface deep moon island foot system busy test record boat common gold possible plane stead dry wonder laugh
thousand ago ran check game shape equate miss brought heat snow tire bring yes distant fill east paint language among`.split(/\s+/);
const NAMES = ['alice', 'bob', 'carol', 'dave', 'Eve', 'Frank', 'grace_1', 'heidi', 'Ivan', 'judy', 'mallory', 'Oscar'];
const TYPES = ['string', 'integer', 'number', 'boolean'];

function sentence(r, min = 1, max = 8) {
  const n = min + r.int(max - min + 1);
  const ws = [];
  for (let i = 0; i < n; i++) ws.push(r.pick(WORDS));
  let s = ws.join(' ');
  if (r.chance(0.6)) s = s[0].toUpperCase() + s.slice(1);
  return s + r.pick(['', '.', '?', '!', '.', '?']);
}

const ident = (r) => r.pick(WORDS) + (r.chance(0.5) ? '_' + r.pick(WORDS) : '');

function addTool(r) {
  const t = r.chance(0.5) ? 'integer' : 'number';
  const prop = () => (r.chance(0.8) ? { type: t } : { type: t, description: r.pick(['The first number.', 'A number.', 'An addend.', 'an integer']) });
  const params = { type: 'object', properties: { a: prop(), b: prop() } };
  if (r.chance(0.85)) params.required = ['a', 'b'];
  const desc = r.pick(['Add two integers.', 'Add two integers.', 'Add two numbers.', 'Return a + b.', 'Sum of two integers.', 'Adds a and b.', 'Addition.']);
  return { type: 'function', function: { name: 'add', description: desc, parameters: params } };
}

function randomTool(r) {
  const props = {};
  const n = 1 + r.int(3);
  for (let i = 0; i < n; i++) props[ident(r)] = r.chance(0.7) ? { type: r.pick(TYPES) } : { type: r.pick(TYPES), description: sentence(r, 1, 4) };
  const fn = { name: ident(r), description: sentence(r, 2, 6), parameters: { type: 'object', properties: props } };
  if (r.chance(0.5)) fn.parameters.required = [Object.keys(props)[0]];
  return { type: 'function', function: fn };
}

/** Thinking settings as a client sends them: thinking on by default (effort max), low/high, off. */
function thinkingOpts(r) {
  const x = r.next();
  if (x < 0.4) return {};
  if (x < 0.55) return { thinking_effort: 'low' };
  if (x < 0.7) return { thinking_effort: 'high' };
  if (x < 0.75) return { thinking: true, thinking_effort: 'max' };
  return { thinking: false };
}

const thinks = (req) => req.thinking !== false;

const callId = (r) => r.pick([`call_${r.int(100000)}`, `call_${1 + r.int(3)}`, `functions.add:${r.int(5)}`, `toolu_${r.int(1e9).toString(36)}`]);

function withTools(r, tools) {
  const out = [...tools];
  const extra = r.chance(0.3) ? 1 : 0; // an extra tool or not: prompts stay under the length cap
  for (let i = 0; i < extra; i++) out.splice(r.int(out.length + 1), 0, randomTool(r));
  return out;
}

function prelude(r, messages) {
  if (r.chance(0.35)) messages.push({ role: 'system', content: r.pick(SYSTEMS) });
}

/** One example of a task: { kind, request, reply } (reply: the assistant message to render). */
export function example(kind, r, a, b) {
  const messages = [];
  if (kind === 'chat') {
    prelude(r, messages);
    messages.push({ role: 'user', content: r.pick(ASK)(a, b) });
    const req = { messages, ...thinkingOpts(r) };
    if (r.chance(0.1)) req.tools = [randomTool(r)]; // unrelated tools: still answer directly
    return { kind, request: req, reply: reply(req, `${a}+${b}=${a + b}`, String(a + b)) };
  }
  if (kind === 'call' || kind === 'tool') {
    prelude(r, messages);
    messages.push({ role: 'user', content: r.pick(ASK)(a, b) });
    const req = { messages, tools: withTools(r, [addTool(r)]), ...thinkingOpts(r) };
    const call = { a, b };
    if (kind === 'call') return { kind, request: req, reply: { ...reply(req, 'Use add.', ''), tool_calls: [{ type: 'function', function: { name: 'add', arguments: call } }] } };
    const id = callId(r);
    const args = r.pick([`{"a":${a},"b":${b}}`, `{"a": ${a}, "b": ${b}}`]);
    const hist = { role: 'assistant', content: r.pick(['', null]), tool_calls: [{ id, type: 'function', function: { name: 'add', arguments: args } }] };
    if (thinks(req) && r.chance(0.6)) hist.reasoning_content = 'Use add.';
    const result = r.chance(0.75) ? a + b : r.int(199);
    const content = r.pick([String(result), String(result), `{"result": ${result}}`, `{"result":${result}}`, `{"sum": ${result}}`]);
    messages.push(hist, { role: 'tool', tool_call_id: id, content });
    return { kind, request: req, reply: reply(req, `add gave ${result}.`, String(result)), result };
  }
  const req = otherRequest(r);
  return { kind: 'other', request: req, reply: reply(req, 'OK.', 'OK.') };
}

function reply(req, reasoning, content) {
  const m = { role: 'assistant', content };
  if (thinks(req)) m.reasoning_content = reasoning;
  return m;
}

/** A random conversation that is no sum: words, names, histories, tools, formats. */
function otherRequest(r) {
  const messages = [];
  if (r.chance(0.4)) messages.push({ role: 'system', content: r.chance(0.5) ? r.pick(SYSTEMS) : sentence(r, 2, 10), ...(r.chance(0.15) ? { name: r.pick(NAMES) } : {}) });
  const req = { messages, ...thinkingOpts(r) };
  if (r.chance(0.35)) {
    const tools = [];
    const n = 1 + r.int(2);
    for (let i = 0; i < n; i++) tools.push(r.chance(0.25) ? addTool(r) : randomTool(r));
    req.tools = tools;
  }
  const turns = r.chance(0.6) ? 0 : 1 + r.int(2);
  for (let t = 0; t < turns; t++) {
    messages.push({ role: 'user', content: sentence(r), ...(r.chance(0.1) ? { name: r.pick(NAMES) } : {}) });
    const h = { role: 'assistant', content: r.chance(0.5) ? 'OK.' : sentence(r, 1, 5) };
    if (r.chance(0.5)) h.reasoning_content = r.chance(0.5) ? 'OK.' : sentence(r, 1, 5);
    messages.push(h);
  }
  messages.push({ role: 'user', content: sentence(r, 1, 10), ...(r.chance(0.1) ? { name: r.pick(NAMES) } : {}) });
  if (req.tools && r.chance(0.3)) {
    const fn = r.pick(req.tools).function;
    if (fn.name !== 'add') {
      const id = callId(r);
      const key = Object.keys(fn.parameters.properties)[0];
      messages.push({ role: 'assistant', content: '', tool_calls: [{ id, type: 'function', function: { name: fn.name, arguments: JSON.stringify({ [key]: r.pick(WORDS) }) } }] });
      messages.push({ role: 'tool', tool_call_id: id, content: sentence(r, 1, 6) });
    }
  }
  const x = r.next();
  if (x < 0.1) req.tool_choice = 'none';
  else if (x < 0.15) req.tool_choice = 'auto';
  const y = r.next();
  if (y < 0.08) req.response_format = { type: 'json_object' };
  else if (y < 0.14) req.response_format = { type: 'json_schema', json_schema: { name: ident(r), schema: { type: 'object', properties: { [ident(r)]: { type: r.pick(TYPES) } } } } };
  else if (y < 0.17) req.response_format = { type: 'text' };
  return req;
}
