// Sampling: turn the logits of the last position into the next id.
//
// The chain is llama.cpp's default order (with OpenAI's logit_bias added after the penalties, as
// vLLM does): penalties -> bias -> top-k -> top-p -> min-p -> temperature ->
// draw. Temperature 0 is greedy: argmax of the (penalized) logits, the first maximum winning ties,
// exactly as `argmax` in greedy.ts. Probabilities are computed in double. The random draws come
// from xoshiro128** seeded through splitmix64, never Math.random: a given seed gives the same ids
// on every run and platform.
//
// Stop ids, stop strings and the token limit are in stop.ts.

import { UserError } from '../util/errors.js';
import { argmax } from './greedy.js';

export interface SamplingOptions {
  /** 0 (default) = greedy; > 0 divides the logits before the draw (< 1 sharpens, > 1 flattens). */
  temperature?: number;
  /** Keep the k most likely ids; 0 (default) = all. */
  topK?: number;
  /** Keep the smallest set of most likely ids whose probability sum reaches p; 1 (default) = all. */
  topP?: number;
  /** Drop ids whose probability is below minP times the largest; 0 (default) = off. */
  minP?: number;
  /** Seen ids: positive logits divided by it, negative ones multiplied; 1 (default) = off. */
  repetitionPenalty?: number;
  /** Subtracted once from the logit of every seen id; 0 (default) = off. */
  presencePenalty?: number;
  /** Subtracted count times from the logit of every seen id; 0 (default) = off. */
  frequencyPenalty?: number;
  /** How many of the most recent ids count as seen; 0 (default) = the whole history (prompt + generated). */
  penaltyLastN?: number;
  /** Seed of the random draws (default 0); any integer 0 .. 2^53-1. */
  seed?: number;
  /** Added to the logit of each id (OpenAI's logit_bias: -100 all but bans an id, +100 all but forces it); ids past the vocabulary are ignored. */
  logitBias?: ReadonlyMap<number, number>;
}

export type ResolvedSampling = Required<Omit<SamplingOptions, 'logitBias'>>;

export const SAMPLING_DEFAULTS: ResolvedSampling = {
  temperature: 0,
  topK: 0,
  topP: 1,
  minP: 0,
  repetitionPenalty: 1,
  presencePenalty: 0,
  frequencyPenalty: 0,
  penaltyLastN: 0,
  seed: 0,
};

/** Fill in defaults and check ranges (UserError naming the option). */
export function resolveSampling(o: SamplingOptions = {}): ResolvedSampling {
  const r: ResolvedSampling = { ...SAMPLING_DEFAULTS };
  for (const k of Object.keys(SAMPLING_DEFAULTS) as (keyof ResolvedSampling)[]) {
    const v = o[k];
    if (v !== undefined) r[k] = v;
  }
  const bad = (name: string, want: string, v: number): never => {
    throw new UserError(`sampling: ${name} must be ${want}, got ${v}`);
  };
  const finite = (name: string, v: number): void => {
    if (!Number.isFinite(v)) bad(name, 'a finite number', v);
  };
  for (const k of Object.keys(r) as (keyof ResolvedSampling)[]) finite(k, r[k]);
  if (r.temperature < 0) bad('temperature', '>= 0', r.temperature);
  if (!Number.isInteger(r.topK) || r.topK < 0) bad('top-k', 'an integer >= 0', r.topK);
  if (r.topP <= 0 || r.topP > 1) bad('top-p', 'in (0, 1]', r.topP);
  if (r.minP < 0 || r.minP > 1) bad('min-p', 'in [0, 1]', r.minP);
  if (r.repetitionPenalty <= 0) bad('repeat-penalty', '> 0', r.repetitionPenalty);
  if (!Number.isInteger(r.penaltyLastN) || r.penaltyLastN < 0) bad('repeat-last-n', 'an integer >= 0', r.penaltyLastN);
  if (!Number.isSafeInteger(r.seed) || r.seed < 0) bad('seed', 'an integer in 0 .. 2^53-1', r.seed);
  return r;
}

/** A checked copy of a logit bias (UserError naming the id), or null when empty. */
export function resolveBias(bias: ReadonlyMap<number, number> | undefined): ReadonlyMap<number, number> | null {
  if (!bias || bias.size === 0) return null;
  for (const [id, v] of bias) {
    if (!Number.isSafeInteger(id) || id < 0) throw new UserError(`sampling: logit bias ids must be integers >= 0, got ${id}`);
    if (!Number.isFinite(v)) throw new UserError(`sampling: logit bias of id ${id} must be a finite number, got ${v}`);
  }
  return new Map(bias);
}

/** Add the bias to the logits of its ids (in place; `logits` indexed by id). */
export function applyBias(logits: Float64Array, bias: ReadonlyMap<number, number> | null): void {
  if (bias) for (const [id, v] of bias) if (id < logits.length) logits[id] = logits[id]! + v;
}

// ---------------------------------------------------------------------------------------------
// Random numbers

const M64 = (1n << 64n) - 1n;

/** splitmix64 step: returns [next state, output]. */
function splitmix64(s: bigint): [bigint, bigint] {
  s = (s + 0x9e3779b97f4a7c15n) & M64;
  let z = s;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return [s, z ^ (z >> 31n)];
}

/** xoshiro128** (Blackman & Vigna), state seeded from splitmix64(seed). */
export class Rng {
  private s = new Uint32Array(4);

  constructor(seed: number | bigint = 0) {
    this.seed(seed);
  }

  seed(seed: number | bigint): void {
    let st = BigInt(seed) & M64;
    for (let i = 0; i < 2; i++) {
      let out: bigint;
      [st, out] = splitmix64(st);
      this.s[2 * i] = Number(out & 0xffffffffn);
      this.s[2 * i + 1] = Number(out >> 32n);
    }
    if ((this.s[0]! | this.s[1]! | this.s[2]! | this.s[3]!) === 0) this.s[0] = 1;
  }

  /** Next 32-bit unsigned value. */
  nextU32(): number {
    const s = this.s;
    const r = Math.imul(rotl(Math.imul(s[1]!, 5), 7), 9) >>> 0;
    const t = s[1]! << 9;
    s[2]! ^= s[0]!;
    s[3]! ^= s[1]!;
    s[1]! ^= s[2]!;
    s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return r;
  }

  /** Uniform double in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextU32() >>> 5; // 27 bits
    const lo = this.nextU32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** A seed derived from a base seed and a number (e.g. the context length at a turn's start), so
 *  a turn's draws do not depend on how many draws earlier turns made. */
export function deriveSeed(seed: number, n: number): bigint {
  const [, a] = splitmix64((BigInt(seed) ^ 0x5851f42d4c957f2dn) & M64);
  const [, b] = splitmix64((a + BigInt(n)) & M64);
  return b;
}

// ---------------------------------------------------------------------------------------------
// The chain, step by step (exported for tests and for anyone building another chain)

/** Candidate ids with their (working) logits; `n` of them are live. Kept sorted by logit
 *  (descending, ties by id) once a step needed the order. */
export interface Candidates {
  ids: Int32Array;
  logits: Float64Array;
  n: number;
  sorted: boolean;
}

export function candidates(logits: ArrayLike<number>, V = logits.length): Candidates {
  const ids = new Int32Array(V);
  const l = new Float64Array(V);
  for (let i = 0; i < V; i++) {
    ids[i] = i;
    l[i] = logits[i]!;
  }
  return { ids, logits: l, n: V, sorted: false };
}

/** Count of each id in the last `lastN` (0 = all) entries of `history`. */
export function tokenCounts(history: readonly number[], lastN = 0): Map<number, number> {
  const counts = new Map<number, number>();
  const from = lastN > 0 ? Math.max(0, history.length - lastN) : 0;
  for (let i = from; i < history.length; i++) {
    const id = history[i]!;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

/** llama.cpp's penalties on the logits of the ids in `counts` (in place): repetition (divide
 *  positive, multiply non-positive), then minus count·frequency + presence. `logits` is indexed
 *  by id (before any reordering). */
export function applyPenalties(logits: Float64Array, counts: ReadonlyMap<number, number>, o: Pick<ResolvedSampling, 'repetitionPenalty' | 'presencePenalty' | 'frequencyPenalty'>): void {
  const rep = o.repetitionPenalty;
  if (rep === 1 && o.presencePenalty === 0 && o.frequencyPenalty === 0) return;
  for (const [id, count] of counts) {
    if (id < 0 || id >= logits.length || count <= 0) continue;
    let v = logits[id]!;
    if (rep !== 1) v = v <= 0 ? v * rep : v / rep;
    v -= count * o.frequencyPenalty + o.presencePenalty;
    logits[id] = v;
  }
}

export function sortCandidates(c: Candidates): void {
  if (c.sorted) return;
  const order = Array.from(c.ids.subarray(0, c.n));
  const l = new Float64Array(c.logits.length);
  for (let i = 0; i < c.n; i++) l[c.ids[i]!] = c.logits[i]!;
  order.sort((a, b) => l[b]! - l[a]! || a - b);
  for (let i = 0; i < c.n; i++) {
    c.ids[i] = order[i]!;
    c.logits[i] = l[order[i]!]!;
  }
  c.sorted = true;
}

/** Keep the k largest (k <= 0 or >= n: no-op). */
export function topK(c: Candidates, k: number): void {
  if (k <= 0 || k >= c.n) return;
  sortCandidates(c);
  c.n = k;
}

/**
 * The index a uniform draw `u` (scaled to the weights' sum) falls on among weights[0..n), the
 * weight at `skip` left out; when rounding leaves u above the sum, the last non-zero weight; -1
 * when none is. One rule for every draw of the samplers and of speculative acceptance.
 */
export function drawIndex(weights: ArrayLike<number>, u: number, n = weights.length, skip = -1): number {
  let cum = 0;
  let last = -1;
  for (let i = 0; i < n; i++) {
    if (i === skip || weights[i]! === 0) continue;
    cum += weights[i]!;
    last = i;
    if (u < cum) return i;
  }
  return last;
}

/** Probabilities of the live candidates (softmax in double). */
export function softmax(c: Candidates): Float64Array {
  const p = new Float64Array(c.n);
  let max = -Infinity;
  for (let i = 0; i < c.n; i++) if (c.logits[i]! > max) max = c.logits[i]!;
  let sum = 0;
  for (let i = 0; i < c.n; i++) {
    const e = c.logits[i]! === -Infinity ? 0 : Math.exp(c.logits[i]! - max);
    p[i] = e;
    sum += e;
  }
  for (let i = 0; i < c.n; i++) p[i] = p[i]! / sum;
  return p;
}

/** Keep the smallest prefix (by probability) whose sum reaches p (p >= 1: no-op); at least one. */
export function topP(c: Candidates, p: number): void {
  if (p >= 1) return;
  sortCandidates(c);
  const probs = softmax(c);
  let cum = 0;
  for (let i = 0; i < c.n; i++) {
    cum += probs[i]!;
    if (cum >= p) {
      c.n = i + 1;
      return;
    }
  }
}

/** Drop candidates with probability < p · (largest probability), i.e. logit < max + ln p. */
export function minP(c: Candidates, p: number): void {
  if (p <= 0 || c.n <= 1) return;
  let max = -Infinity;
  for (let i = 0; i < c.n; i++) if (c.logits[i]! > max) max = c.logits[i]!;
  const threshold = max + Math.log(p);
  let w = 0;
  for (let i = 0; i < c.n; i++) {
    if (c.logits[i]! >= threshold) {
      c.ids[w] = c.ids[i]!;
      c.logits[w] = c.logits[i]!;
      w++;
    }
  }
  c.n = Math.max(w, 1);
}

export function applyTemperature(c: Candidates, t: number): void {
  if (t === 1) return;
  for (let i = 0; i < c.n; i++) c.logits[i] = c.logits[i]! / t;
}

/** Index of the first maximum among the live candidates, as an id. */
function argmaxId(c: Candidates): number {
  let best = 0;
  let bestV = -Infinity;
  for (let i = 0; i < c.n; i++) {
    const v = c.logits[i]!;
    if (v > bestV || (v === bestV && c.ids[i]! < c.ids[best]!)) {
      bestV = v;
      best = i;
    }
  }
  return c.ids[best]!;
}

export class Sampler {
  readonly opts: ResolvedSampling;
  readonly bias: ReadonlyMap<number, number> | null;
  readonly rng: Rng;

  constructor(opts: SamplingOptions = {}) {
    this.opts = resolveSampling(opts);
    this.bias = resolveBias(opts.logitBias);
    this.rng = new Rng(this.opts.seed);
  }

  get greedy(): boolean {
    return this.opts.temperature === 0;
  }

  /** Restart the random sequence (seed: the configured one by default). */
  reseed(seed: number | bigint = this.opts.seed): void {
    this.rng.seed(seed);
  }

  /** Logits (first V entries are the vocabulary) after penalties and bias: a Float64Array copy. */
  private prepared(logits: ArrayLike<number>, history: readonly number[], V: number): Candidates {
    const c = candidates(logits, V);
    applyPenalties(c.logits, tokenCounts(history, this.opts.penaltyLastN), this.opts);
    applyBias(c.logits, this.bias);
    return c;
  }

  /**
   * The distribution the next id is drawn from: ids and probabilities (summing to 1), after the
   * whole chain. Greedy: the single argmax with probability 1.
   */
  distribution(logits: ArrayLike<number>, history: readonly number[] = [], V = logits.length): { ids: number[]; probs: number[] } {
    const c = this.filtered(logits, history, V);
    if (this.greedy) return { ids: [argmaxId(c)], probs: [1] };
    const p = softmax(c);
    return { ids: Array.from(c.ids.subarray(0, c.n)), probs: Array.from(p) };
  }

  private filtered(logits: ArrayLike<number>, history: readonly number[], V: number): Candidates {
    const c = this.prepared(logits, history, V);
    if (this.greedy) return c;
    const o = this.opts;
    topK(c, o.topK);
    topP(c, o.topP);
    minP(c, o.minP);
    applyTemperature(c, o.temperature);
    return c;
  }

  /** Greedy with nothing that changes a logit: the argmax is read off the logits themselves. */
  private get plainGreedy(): boolean {
    const o = this.opts;
    return this.greedy && !this.bias && o.repetitionPenalty === 1 && o.presencePenalty === 0 && o.frequencyPenalty === 0;
  }

  /** The next id, given the logits of the last position and the ids seen so far (prompt + generated). */
  sample(logits: ArrayLike<number>, history: readonly number[] = [], V = logits.length): number {
    // the first maximum, as argmaxId over the candidates (ids ascending, f32 -> f64 exact), without
    // copying a vocabulary-sized array per token
    if (this.plainGreedy) return argmax(logits, 0, V);
    const c = this.filtered(logits, history, V);
    if (this.greedy) return argmaxId(c);
    const i = drawIndex(softmax(c), this.rng.nextFloat(), c.n);
    return c.ids[i >= 0 ? i : 0]!;
  }
}
