// The DSpark drafter's forward pass (docs/DSPARK.md §3), a float64 reference: plain loops over
// row-major matrices, written to be read and to check faster code against, not to run K3's real
// drafters (those will go through the kernels). One call drafts one block:
//
//   context:  c_p = RMSNorm(W_ctx · [taps of position p]; context_norm)     (fc_norm per tap first, when declared)
//             each layer's keys/values of c_p (MLA: the normed latent and the rotated rope key;
//             GQA: k_norm'd, rotated keys and values), for the positions before the anchor;
//   block:    slots at anchor_pos + s holding [anchor, mask, mask, ...], a pre-norm decoder
//             (attention over the context rows and the block slots, SwiGLU MLP), final RMSNorm;
//   heads:    logits of each proposing slot, plus the Markov bias markov_w2 · markov_w1[prev],
//             argmax left to right from the anchor; confidence sigmoid(proj([h, markov_w1[prev]]) + b).

import type { DrafterConfig, DrafterGqa, DrafterMla } from '../checkpoint/drafter-types.js';
import { drafterSlots } from '../checkpoint/drafter-tensors.js';
import { makeRope, yarnScaleFactor, type Rope } from './rope.js';

export type Vec = Float64Array;

/** The drafter's tensors by checkpoint name, as float64, row-major. */
export type DraftWeights = (name: string) => Vec;

export interface DraftInput {
  /** Per context position: the concatenated tapped states, taps x target hidden. */
  context: Vec[];
  /** The positions of those rows (the rows at or after the anchor's position are not attended). */
  contextPositions: number[];
  anchor: number;
  anchorPosition: number;
  /** A row of the input embedding (K3's, or the drafter's own when it ships one). */
  embed: (id: number) => Vec;
  /** Logits of a final hidden state (K3's lm_head, or the drafter's own). */
  lmHead: (h: Vec) => Vec;
  /** Picks a proposal from its scores (logits + Markov bias); default argmax, the first maximum winning. */
  choose?: (scores: Vec) => number;
}

export interface DraftOutput {
  /** The proposed tokens, position anchor+1 first. */
  tokens: number[];
  /** Per proposal, the confidence head's acceptance estimate (null without the head). */
  confidence: number[] | null;
  /** Final-normed hidden state of every query slot. */
  hidden: Vec[];
  /** Per proposal, the scores it was picked from: logits + markov_w2 · markov_w1[prev]. */
  scores: Vec[];
}

/** y = W x (W row-major [rows, cols]), x read from offset `xo`. */
export function matvec(w: Vec, rows: number, cols: number, x: Vec, xo = 0): Vec {
  if (w.length !== rows * cols) throw new Error(`dspark-ref: matrix of ${w.length} values is not ${rows} x ${cols}`);
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let c = 0; c < cols; c++) s += w[r * cols + c]! * x[xo + c]!;
    y[r] = s;
  }
  return y;
}

function rmsNorm(x: Vec, w: Vec, eps: number, o = 0, n = x.length - o): Vec {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[o + i]! * x[o + i]!;
  const r = 1 / Math.sqrt(ss / n + eps);
  const y = new Float64Array(n);
  for (let i = 0; i < n; i++) y[i] = x[o + i]! * r * w[i]!;
  return y;
}

/** Rotate x[o .. o+d) for `pos`: interleaved pairs (DeepSeek MLA) or split halves (Qwen3). */
function rope(r: Rope, x: Vec, o: number, pos: number, interleaved: boolean): void {
  const half = r.freqs.length;
  for (let i = 0; i < half; i++) {
    const ang = pos * r.freqs[i]!;
    const c = Math.cos(ang) * r.amplitude;
    const s = Math.sin(ang) * r.amplitude;
    const ia = interleaved ? o + 2 * i : o + i;
    const ib = interleaved ? o + 2 * i + 1 : o + half + i;
    const a = x[ia]!;
    const b = x[ib]!;
    x[ia] = a * c - b * s;
    x[ib] = b * c + a * s;
  }
}

/** One attended row: MLA keeps [normed latent | rotated rope key]; GQA [keys | values]. */
type KvRow = { k: Vec; v: Vec; pos: number };

/** Keys/values of one layer for a normed input `x` at `pos`. */
function layerKv(cfg: DrafterConfig, w: DraftWeights, l: number, x: Vec, pos: number, r: Rope): KvRow {
  const H = cfg.hiddenSize;
  const p = `layers.${l}.self_attn.`;
  if (cfg.attn.kind === 'mla') {
    const a = cfg.attn;
    const kv = matvec(w(`${p}kv_a_proj_with_mqa.weight`), a.kvLoraRank + a.ropeDim, H, x);
    const lat = rmsNorm(kv, w(`${p}kv_a_layernorm.weight`), cfg.rmsNormEps, 0, a.kvLoraRank);
    const kpe = kv.slice(a.kvLoraRank);
    rope(r, kpe, 0, pos, true);
    return { k: lat, v: kpe, pos };
  }
  const a = cfg.attn;
  const k = matvec(w(`${p}k_proj.weight`), a.kvHeads * a.headDim, H, x);
  const kn = w(`${p}k_norm.weight`);
  for (let h = 0; h < a.kvHeads; h++) {
    k.set(rmsNorm(k, kn, cfg.rmsNormEps, h * a.headDim, a.headDim), h * a.headDim);
    rope(r, k, h * a.headDim, pos, false);
  }
  return { k, v: matvec(w(`${p}v_proj.weight`), a.kvHeads * a.headDim, H, x), pos };
}

function softmaxInPlace(s: number[]): void {
  const m = Math.max(...s);
  let z = 0;
  for (let i = 0; i < s.length; i++) z += s[i] = Math.exp(s[i]! - m);
  for (let i = 0; i < s.length; i++) s[i]! /= z;
}

/** MLA attention of one query slot over `rows`: per head, [q_nope · k_nope + q_rope · k_pe] x scale, values from kv_b. */
function mlaAttend(cfg: DrafterConfig, a: DrafterMla, w: DraftWeights, l: number, h: Vec, pos: number, rows: KvRow[], r: Rope): Vec {
  const p = `layers.${l}.self_attn.`;
  const dq = a.nopeDim + a.ropeDim;
  const qa = rmsNorm(matvec(w(`${p}q_a_proj.weight`), a.qLoraRank, cfg.hiddenSize, h), w(`${p}q_a_layernorm.weight`), cfg.rmsNormEps);
  const q = matvec(w(`${p}q_b_proj.weight`), a.heads * dq, a.qLoraRank, qa);
  for (let hd = 0; hd < a.heads; hd++) rope(r, q, hd * dq + a.nopeDim, pos, true);
  const kvb = rows.map((row) => matvec(w(`${p}kv_b_proj.weight`), a.heads * (a.nopeDim + a.vDim), a.kvLoraRank, row.k));
  const scale = yarnScaleFactor(cfg.rope.yarn) / Math.sqrt(dq);
  const out = new Float64Array(a.heads * a.vDim);
  for (let hd = 0; hd < a.heads; hd++) {
    const s = rows.map((row, j) => {
      let dot = 0;
      const kb = hd * (a.nopeDim + a.vDim);
      for (let i = 0; i < a.nopeDim; i++) dot += q[hd * dq + i]! * kvb[j]![kb + i]!;
      for (let i = 0; i < a.ropeDim; i++) dot += q[hd * dq + a.nopeDim + i]! * row.v[i]!;
      return dot * scale;
    });
    softmaxInPlace(s);
    for (let j = 0; j < rows.length; j++) for (let i = 0; i < a.vDim; i++) out[hd * a.vDim + i]! += s[j]! * kvb[j]![hd * (a.nopeDim + a.vDim) + a.nopeDim + i]!;
  }
  return matvec(w(`${p}o_proj.weight`), cfg.hiddenSize, a.heads * a.vDim, out);
}

/** GQA attention of one query slot over `rows` (q_norm'd, rotated queries; scale 1/sqrt(head_dim)). */
function gqaAttend(cfg: DrafterConfig, a: DrafterGqa, w: DraftWeights, l: number, h: Vec, pos: number, rows: KvRow[], r: Rope): Vec {
  const p = `layers.${l}.self_attn.`;
  const d = a.headDim;
  const q = matvec(w(`${p}q_proj.weight`), a.heads * d, cfg.hiddenSize, h);
  const qn = w(`${p}q_norm.weight`);
  const out = new Float64Array(a.heads * d);
  const group = a.heads / a.kvHeads;
  for (let hd = 0; hd < a.heads; hd++) {
    q.set(rmsNorm(q, qn, cfg.rmsNormEps, hd * d, d), hd * d);
    rope(r, q, hd * d, pos, false);
    const kh = Math.floor(hd / group) * d;
    const s = rows.map((row) => {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += q[hd * d + i]! * row.k[kh + i]!;
      return dot / Math.sqrt(d);
    });
    softmaxInPlace(s);
    for (let j = 0; j < rows.length; j++) for (let i = 0; i < d; i++) out[hd * d + i]! += s[j]! * rows[j]!.v[kh + i]!;
  }
  return matvec(w(`${p}o_proj.weight`), cfg.hiddenSize, a.heads * d, out);
}

/** The context rows' projection: per-tap fc_norm when declared, then the context projection and its norm. */
export function projectContext(cfg: DrafterConfig, w: DraftWeights, taps: Vec): Vec {
  const TH = cfg.targetHiddenSize;
  const mla = cfg.format === 'k3_dspark';
  let x = taps;
  if (cfg.tapNorm) {
    x = new Float64Array(taps.length);
    for (let t = 0; t < cfg.taps.length; t++) x.set(rmsNorm(taps, w(`fc_norm.${t}.weight`), cfg.rmsNormEps, t * TH, TH), t * TH);
  }
  const y = matvec(w(mla ? 'context_proj.weight' : 'fc.weight'), cfg.hiddenSize, cfg.taps.length * TH, x);
  return rmsNorm(y, w(mla ? 'context_norm.weight' : 'hidden_norm.weight'), cfg.rmsNormEps);
}

/** Draft one block (the module comment says how). */
export function draftBlock(cfg: DrafterConfig, w: DraftWeights, input: DraftInput): DraftOutput {
  const H = cfg.hiddenSize;
  const dr = cfg.attn.kind === 'mla' ? cfg.attn.ropeDim : cfg.attn.headDim;
  const r = makeRope(dr, cfg.rope.theta, cfg.rope.yarn);
  const S = drafterSlots(cfg);
  const ctx = input.context.map((t) => projectContext(cfg, w, t));
  let x = Array.from({ length: S }, (_, s) => Float64Array.from(input.embed(s === 0 ? input.anchor : cfg.maskTokenId)));
  for (let l = 0; l < cfg.numLayers; l++) {
    const window = cfg.attn.kind === 'gqa' && cfg.attn.layerKinds[l] === 'sliding' ? cfg.attn.slidingWindow! : Infinity;
    const ctxRows = ctx.flatMap((c, i) => {
      const pos = input.contextPositions[i]!;
      return pos < input.anchorPosition && pos >= input.anchorPosition - window ? [layerKv(cfg, w, l, c, pos, r)] : [];
    });
    const h = x.map((xs) => rmsNorm(xs, w(`layers.${l}.input_layernorm.weight`), cfg.rmsNormEps));
    const blockRows = h.map((hs, s) => layerKv(cfg, w, l, hs, input.anchorPosition + s, r));
    x = x.map((xs, s) => {
      const rows = [...ctxRows, ...(cfg.blockAttention === 'causal' ? blockRows.slice(0, s + 1) : blockRows)];
      const pos = input.anchorPosition + s;
      const att = cfg.attn.kind === 'mla' ? mlaAttend(cfg, cfg.attn, w, l, h[s]!, pos, rows, r) : gqaAttend(cfg, cfg.attn, w, l, h[s]!, pos, rows, r);
      const y = xs.map((v, i) => v + att[i]!);
      const m = rmsNorm(y, w(`layers.${l}.post_attention_layernorm.weight`), cfg.rmsNormEps);
      const I = cfg.intermediateSize;
      const g = matvec(w(`layers.${l}.mlp.gate_proj.weight`), I, H, m);
      const u = matvec(w(`layers.${l}.mlp.up_proj.weight`), I, H, m);
      const act = g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!);
      const down = matvec(w(`layers.${l}.mlp.down_proj.weight`), H, I, act);
      return y.map((v, i) => v + down[i]!);
    });
  }
  const hidden = x.map((xs) => rmsNorm(xs, w(cfg.format === 'k3_dspark' ? 'final_norm.weight' : 'norm.weight'), cfg.rmsNormEps));
  return { ...markovWalk(cfg, w, input, hidden), hidden };
}

/** Left to right from the anchor: logits + markov_w2 · markov_w1[prev], argmax; the confidence of each step. */
function markovWalk(cfg: DrafterConfig, w: DraftWeights, input: DraftInput, hidden: Vec[]): { tokens: number[]; confidence: number[] | null; scores: Vec[] } {
  const R = cfg.markov.rank;
  const w1 = w('markov_head.markov_w1.weight');
  const w2 = w('markov_head.markov_w2.weight');
  const first = cfg.slots === 'next' ? 0 : 1;
  const tokens: number[] = [];
  const scores: Vec[] = [];
  const confidence: number[] | null = cfg.confidence ? [] : null;
  let prev = input.anchor;
  for (let k = 0; k < cfg.block; k++) {
    const h = hidden[first + k]!;
    const e = w1.subarray(prev * R, (prev + 1) * R);
    const logits = input.lmHead(h);
    const sc = matvec(w2, cfg.draftVocabSize, R, e);
    for (let v = 0; v < sc.length; v++) sc[v]! += logits[v]!;
    let best = 0;
    if (input.choose) best = input.choose(sc);
    else for (let v = 1; v < sc.length; v++) if (sc[v]! > sc[best]!) best = v;
    scores.push(sc);
    if (confidence && cfg.confidence) {
      const cw = w('confidence_head.proj.weight');
      let z = w('confidence_head.proj.bias')[0]!;
      for (let i = 0; i < cfg.hiddenSize; i++) z += cw[i]! * h[i]!;
      if (cfg.confidence.withMarkov) for (let i = 0; i < R; i++) z += cw[cfg.hiddenSize + i]! * e[i]!;
      confidence.push(1 / (1 + Math.exp(-z)));
    }
    tokens.push(best);
    prev = best;
  }
  return { tokens, confidence, scores };
}
