// The DSpark drafter's forward pass on the engine's kernels (docs/DSPARK.md §3, §7): the same
// computation as the float64 reference (model/dspark-ref.ts, which the tests check it against),
// in f32 with every product a Compute matmul on the drafter's BF16 weights as shipped, and K3's
// embedding and lm_head shared (dspark-weights.ts). Two halves:
//
//   project: when K3's forward hands out the taps of T positions, their context rows
//            (fc_norm, context projection, its norm) and each layer's keys/values of them (MLA: the
//            normed latent and the rotated rope key; GQA: normed, rotated keys and values) are
//            computed once, T rows per product, and kept per position (the drafter's KV cache);
//   draft:   the block's slots [anchor, mask, ...] through the layers, attending to the kept rows
//            before the anchor and to the block's own; final norm; logits of the proposing slots
//            in one lm_head product; the Markov walk and the confidence head, left to right.
//
// Every output element is a canonical dot (or a double reduction in index order rounded once), so
// nothing depends on threads, on how many rows a product had, or on the forward's chunk size.

import type { DrafterConfig, DrafterGqa, DrafterMla } from '../checkpoint/drafter-types.js';
import { drafterSlots } from '../checkpoint/drafter-tensors.js';
import type { WeightView } from '../formats/weight.js';
import type { Compute } from '../graph/compute.js';
import { rowSlice } from '../store/mat.js';
import type { DSparkTarget, DSparkWeights } from './dspark-weights.js';
import { rmsNorm } from './ops.js';
import { applyRope, makeRope, yarnScaleFactor, type Rope } from './rope.js';

const fr = Math.fround;

/** One position's keys/values in one layer: MLA [latent | rope key], GQA [keys | values]. */
export interface KvRow {
  k: Float32Array;
  v: Float32Array;
}

export interface BlockDraft {
  /** The proposals, position anchor+1 first. */
  tokens: number[];
  /** Per proposal, the confidence head's acceptance estimate in [0, 1] (null without the head). */
  confidence: number[] | null;
  /** Per proposal, the scores it was picked from: logits + Markov bias. */
  scores: Float32Array[];
  /** The final-normed hidden state of every slot [slots, H]. */
  hidden: Float32Array;
}

/** Rotate split halves (Qwen3-style GQA) of x[o .. o+d) for `pos`; applyRope does interleaved pairs (MLA). */
function ropeHalves(r: Rope, x: Float32Array, o: number, pos: number): void {
  const half = r.freqs.length;
  for (let i = 0; i < half; i++) {
    const ang = pos * r.freqs[i]!;
    const c = Math.cos(ang) * r.amplitude;
    const s = Math.sin(ang) * r.amplitude;
    const a = x[o + i]!;
    const b = x[o + half + i]!;
    x[o + i] = a * c - b * s;
    x[o + half + i] = b * c + a * s;
  }
}

/** Softmax of s in double, in place. */
function softmax(s: Float64Array): void {
  let m = -Infinity;
  for (const v of s) m = Math.max(m, v);
  let z = 0;
  for (let i = 0; i < s.length; i++) z += s[i] = Math.exp(s[i]! - m);
  for (let i = 0; i < s.length; i++) s[i]! /= z;
}

export class DSparkForward {
  private readonly rope: Rope;
  private readonly mla: boolean;

  constructor(
    readonly cfg: DrafterConfig,
    private readonly w: DSparkWeights,
    private readonly target: DSparkTarget,
    private readonly c: Compute,
  ) {
    this.mla = cfg.attn.kind === 'mla';
    this.rope = makeRope(cfg.attn.kind === 'mla' ? cfg.attn.ropeDim : cfg.attn.headDim, cfg.rope.theta, cfg.rope.yarn);
  }

  /** Bytes the drafter read from the target's files so far (dspark-weights.ts DSparkTarget). */
  get bytesRead(): number {
    return this.target.bytesRead;
  }

  private mm(name: string, x: Float32Array, T: number): Float32Array {
    const w = this.w.mat(name);
    const y = new Float32Array(T * w.rows);
    this.c.matmul(w, x, T, y);
    return y;
  }

  private norm(name: string, x: Float32Array, T: number, n: number): Float32Array {
    return rmsNorm(x, T, n, this.w.vec(name), this.cfg.rmsNormEps);
  }

  /** Per row of taps [T, taps x target hidden] at positions pos.., per layer: its keys/values. */
  project(pos: number, T: number, taps: Float32Array): KvRow[][] {
    const cfg = this.cfg;
    const TH = cfg.targetHiddenSize;
    const n = cfg.taps.length;
    let x = taps;
    if (cfg.tapNorm) {
      x = new Float32Array(T * n * TH);
      const tmp = new Float32Array(T * TH);
      for (let t = 0; t < n; t++) {
        rmsNorm(taps, T, TH, this.w.vec(`fc_norm.${t}.weight`), cfg.rmsNormEps, tmp, t * TH, n * TH);
        for (let r = 0; r < T; r++) x.set(tmp.subarray(r * TH, (r + 1) * TH), r * n * TH + t * TH);
      }
    }
    const ctx = this.norm(this.mla ? 'context_norm.weight' : 'hidden_norm.weight', this.mm(this.mla ? 'context_proj.weight' : 'fc.weight', x, T), T, cfg.hiddenSize);
    const positions = Array.from({ length: T }, (_, t) => pos + t);
    const perLayer = Array.from({ length: cfg.numLayers }, (_, l) => this.layerKv(l, ctx, positions));
    return positions.map((_, t) => perLayer.map((rows) => rows[t]!));
  }

  /** Keys/values of layer l for normed inputs x [T, H] at `positions`. */
  private layerKv(l: number, x: Float32Array, positions: number[]): KvRow[] {
    const cfg = this.cfg;
    const p = `layers.${l}.self_attn.`;
    const T = positions.length;
    if (cfg.attn.kind === 'mla') {
      const { kvLoraRank: L, ropeDim: dr } = cfg.attn;
      const kv = this.mm(`${p}kv_a_proj_with_mqa.weight`, x, T);
      const lat = rmsNorm(kv, T, L, this.w.vec(`${p}kv_a_layernorm.weight`), cfg.rmsNormEps, new Float32Array(T * L), 0, L + dr);
      return positions.map((pos, t) => {
        const kpe = kv.slice(t * (L + dr) + L, (t + 1) * (L + dr));
        applyRope(this.rope, kpe, 0, pos);
        return { k: lat.subarray(t * L, (t + 1) * L), v: kpe };
      });
    }
    const { kvHeads, headDim: d } = cfg.attn;
    const W = kvHeads * d;
    const k = this.mm(`${p}k_proj.weight`, x, T);
    const kn = rmsNorm(k, T * kvHeads, d, this.w.vec(`${p}k_norm.weight`), cfg.rmsNormEps);
    const v = this.mm(`${p}v_proj.weight`, x, T);
    return positions.map((pos, t) => {
      for (let h = 0; h < kvHeads; h++) ropeHalves(this.rope, kn, t * W + h * d, pos);
      return { k: kn.subarray(t * W, (t + 1) * W), v: v.subarray(t * W, (t + 1) * W) };
    });
  }

  /** The block for `anchor` at `anchorPos`, attending to `context[p]` (per position, per layer) for p < anchorPos. */
  draft(context: readonly (readonly KvRow[] | undefined)[], anchor: number, anchorPos: number, choose?: (scores: Float32Array) => number): BlockDraft {
    const cfg = this.cfg;
    const H = cfg.hiddenSize;
    const S = drafterSlots(cfg);
    let x: Float32Array = new Float32Array(S * H);
    for (let s = 0; s < S; s++) this.target.embedRow(s === 0 ? anchor : cfg.maskTokenId, x.subarray(s * H, (s + 1) * H));
    for (let l = 0; l < cfg.numLayers; l++) {
      const window = cfg.attn.kind === 'gqa' && cfg.attn.layerKinds[l] === 'sliding' ? cfg.attn.slidingWindow! : Infinity;
      const ctxRows: KvRow[] = [];
      for (let p = Math.max(0, anchorPos - window); p < anchorPos; p++) ctxRows.push(context[p]![l]!);
      x = this.layer(l, x, S, anchorPos, ctxRows);
    }
    const hidden = this.norm(this.mla ? 'final_norm.weight' : 'norm.weight', x, S, H);
    return { ...this.markovWalk(hidden, anchor, choose), hidden };
  }

  /** One pre-norm decoder layer over the block's slots x [S, H]. */
  private layer(l: number, x: Float32Array, S: number, anchorPos: number, ctxRows: KvRow[]): Float32Array {
    const cfg = this.cfg;
    const H = cfg.hiddenSize;
    const h = this.norm(`layers.${l}.input_layernorm.weight`, x, S, H);
    const positions = Array.from({ length: S }, (_, s) => anchorPos + s);
    const blockRows = this.layerKv(l, h, positions);
    const rowsOf = (s: number): KvRow[] => [...ctxRows, ...(cfg.blockAttention === 'causal' ? blockRows.slice(0, s + 1) : blockRows)];
    const att = cfg.attn.kind === 'mla' ? this.mlaAttend(cfg.attn, l, h, positions, rowsOf) : this.gqaAttend(cfg.attn, l, h, positions, rowsOf);
    const o = this.mm(`layers.${l}.self_attn.o_proj.weight`, att, S);
    const y = new Float32Array(S * H);
    for (let i = 0; i < y.length; i++) y[i] = x[i]! + o[i]!;
    const m = this.norm(`layers.${l}.post_attention_layernorm.weight`, y, S, H);
    const g = this.mm(`layers.${l}.mlp.gate_proj.weight`, m, S);
    const u = this.mm(`layers.${l}.mlp.up_proj.weight`, m, S);
    for (let i = 0; i < g.length; i++) g[i] = (g[i]! / (1 + Math.exp(-g[i]!))) * u[i]!;
    const down = this.mm(`layers.${l}.mlp.down_proj.weight`, g, S);
    for (let i = 0; i < y.length; i++) y[i] = y[i]! + down[i]!;
    return y;
  }

  /**
   * MLA in the absorbed form: per head, q_lat = q_nope · U_K, scores q_lat · latent + q_rope · rope
   * key (x YaRN scale / sqrt(dq)), the weighted latent sum, then U_V; returns [S, heads x vDim].
   */
  private mlaAttend(a: DrafterMla, l: number, h: Float32Array, positions: number[], rowsOf: (s: number) => KvRow[]): Float32Array {
    const p = `layers.${l}.self_attn.`;
    const { heads: NH, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: L } = a;
    const dq = dn + dr;
    const S = positions.length;
    const qa = this.norm(`${p}q_a_layernorm.weight`, this.mm(`${p}q_a_proj.weight`, h, S), S, a.qLoraRank);
    const q = this.mm(`${p}q_b_proj.weight`, qa, S);
    const kvb = this.w.mat(`${p}kv_b_proj.weight`);
    const scale = yarnScaleFactor(this.cfg.rope.yarn) / Math.sqrt(dq);
    const oLat = new Float32Array(NH * S * L); // [head, slot, L]: each head's U_V takes all slots in one product
    const qLat = new Float32Array(NH * L);
    for (let s = 0; s < S; s++) {
      for (let hd = 0; hd < NH; hd++) applyRope(this.rope, q, s * NH * dq + hd * dq + dn, positions[s]!);
      this.c.matvecTHeads(kvb, 0, dn + dv, dn, q, s * NH * dq, dq, qLat, NH);
      const rows = rowsOf(s);
      for (let hd = 0; hd < NH; hd++) {
        const qr = s * NH * dq + hd * dq + dn;
        const sc = new Float64Array(rows.length);
        rows.forEach((row, j) => {
          let dot = 0;
          for (let i = 0; i < L; i++) dot += qLat[hd * L + i]! * row.k[i]!;
          for (let i = 0; i < dr; i++) dot += q[qr + i]! * row.v[i]!;
          sc[j] = dot * scale;
        });
        softmax(sc);
        const o = (hd * S + s) * L;
        for (let i = 0; i < L; i++) {
          let acc = 0;
          for (let j = 0; j < rows.length; j++) acc += sc[j]! * rows[j]!.k[i]!;
          oLat[o + i] = fr(acc);
        }
      }
    }
    const out = new Float32Array(S * NH * dv);
    const part = new Float32Array(S * dv);
    for (let hd = 0; hd < NH; hd++) {
      const uv: WeightView = rowSlice(kvb, hd * (dn + dv) + dn, hd * (dn + dv) + dn + dv);
      this.c.matmul(uv, oLat.subarray(hd * S * L, (hd + 1) * S * L), S, part);
      for (let s = 0; s < S; s++) out.set(part.subarray(s * dv, (s + 1) * dv), s * NH * dv + hd * dv);
    }
    return out;
  }

  /** Grouped-query attention: q_norm'd, rotated queries over the rows' keys, 1/sqrt(head_dim); returns [S, heads x d]. */
  private gqaAttend(a: DrafterGqa, l: number, h: Float32Array, positions: number[], rowsOf: (s: number) => KvRow[]): Float32Array {
    const p = `layers.${l}.self_attn.`;
    const d = a.headDim;
    const S = positions.length;
    const NH = a.heads;
    const q = rmsNorm(this.mm(`${p}q_proj.weight`, h, S), S * NH, d, this.w.vec(`${p}q_norm.weight`), this.cfg.rmsNormEps);
    const group = NH / a.kvHeads;
    const out = new Float32Array(S * NH * d);
    for (let s = 0; s < S; s++) {
      const rows = rowsOf(s);
      for (let hd = 0; hd < NH; hd++) {
        const qo = (s * NH + hd) * d;
        ropeHalves(this.rope, q, qo, positions[s]!);
        const kh = Math.floor(hd / group) * d;
        const sc = new Float64Array(rows.length);
        rows.forEach((row, j) => {
          let dot = 0;
          for (let i = 0; i < d; i++) dot += q[qo + i]! * row.k[kh + i]!;
          sc[j] = dot / Math.sqrt(d);
        });
        softmax(sc);
        for (let i = 0; i < d; i++) {
          let acc = 0;
          for (let j = 0; j < rows.length; j++) acc += sc[j]! * rows[j]!.v[kh + i]!;
          out[qo + i] = fr(acc);
        }
      }
    }
    return out;
  }

  /** Logits of the proposing slots in one lm_head product; then left to right: + markov_w2 · markov_w1[prev], pick, confidence. */
  private markovWalk(hidden: Float32Array, anchor: number, choose?: (scores: Float32Array) => number): Omit<BlockDraft, 'hidden'> {
    const cfg = this.cfg;
    const H = cfg.hiddenSize;
    const R = cfg.markov.rank;
    const V = cfg.draftVocabSize;
    const first = cfg.slots === 'next' ? 0 : 1;
    const logits = this.target.logits(hidden.subarray(first * H, (first + cfg.block) * H), cfg.block);
    const w2 = this.w.mat('markov_head.markov_w2.weight');
    const e = new Float32Array(R);
    const tokens: number[] = [];
    const scores: Float32Array[] = [];
    const confidence: number[] | null = cfg.confidence ? [] : null;
    let prev = anchor;
    for (let k = 0; k < cfg.block; k++) {
      this.w.row('markov_head.markov_w1.weight', prev, e);
      const sc = new Float32Array(V);
      this.c.matmul(w2, e, 1, sc);
      for (let v = 0; v < V; v++) sc[v] = sc[v]! + logits[k * V + v]!;
      let best = 0;
      if (choose) best = choose(sc);
      else for (let v = 1; v < V; v++) if (sc[v]! > sc[best]!) best = v;
      scores.push(sc);
      if (confidence) confidence.push(this.confidence(hidden, (first + k) * H, e));
      tokens.push(best);
      prev = best;
    }
    return { tokens, confidence, scores };
  }

  /** sigmoid(proj · [h, markov_w1[prev]] + b), the dot in double. */
  private confidence(hidden: Float32Array, ho: number, e: Float32Array): number {
    const cfg = this.cfg;
    const H = cfg.hiddenSize;
    const cw = this.w.vec('confidence_head.proj.weight');
    let z = this.w.vec('confidence_head.proj.bias')[0]!;
    for (let i = 0; i < H; i++) z += cw[i]! * hidden[ho + i]!;
    if (cfg.confidence!.withMarkov) for (let i = 0; i < cfg.markov.rank; i++) z += cw[H + i]! * e[i]!;
    return 1 / (1 + Math.exp(-z));
  }
}
