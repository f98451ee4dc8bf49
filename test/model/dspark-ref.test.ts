// The DSpark drafter's float64 reference forward (src/model/dspark-ref.ts) against tiny
// computations written out here independently (a one-layer GQA drafter, 4 wide, two heads sharing
// one key/value head, rotary pairs (i, i + d/2); a one-layer MLA drafter with YaRN, interleaved
// pairs), and its masks and heads on the four synthesized layouts, read from their safetensors.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { draftBlock, type DraftInput, type DraftWeights } from '../../src/model/dspark-ref.js';
import { parseDrafterConfig } from '../../src/checkpoint/drafter-config.js';
import { drafterTensorSpecs } from '../../src/checkpoint/drafter-tensors.js';
import type { DrafterConfig } from '../../src/checkpoint/drafter-types.js';
import { loadDrafter } from '../../src/checkpoint/drafter.js';
import { drafterConfigJson, synthDrafter, type DrafterLayout } from '../../src/synth/drafter.js';
import { bf16ToF32 } from '../../src/formats/dtypes.js';
import { makeRope, yarnScaleFactor } from '../../src/model/rope.js';
import { readTensorBytes, xorshift } from '../helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-dspark-ref-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

/** A one-layer GQA drafter: hidden 4, heads 2 over 1 kv head of dim 4, vocab 6, Markov rank 2, block 2. */
function tinyConfig(): DrafterConfig {
  const j = drafterConfigJson('radixark', 'tiny') as Record<string, unknown>;
  Object.assign(j, { hidden_size: 4, intermediate_size: 3, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 4, vocab_size: 6 });
  Object.assign(j, { markov_rank: 2, block_size: 2, num_target_layers: 2, target_hidden_size: 4, rope_theta: 100 });
  delete j.rope_scaling;
  j.dflash_config = { target_layer_ids: [0], mask_token_id: 5 };
  return parseDrafterConfig(j, 'tiny/config.json');
}

function randomWeights(cfg: DrafterConfig, seed: number): Map<string, Float64Array> {
  const rnd = xorshift(seed);
  return new Map(drafterTensorSpecs(cfg).map((s) => [s.name, Float64Array.from({ length: s.shape.reduce((a, b) => a * b, 1) }, () => (s.name.endsWith('norm.weight') ? 0.8 + 0.4 * rnd() : rnd() * 2 - 1))]));
}

// --- the independent computation, for tinyConfig's sizes only ---
type M = number[];
const mv = (w: Float64Array, rows: number, x: M): M => Array.from({ length: rows }, (_, r) => x.reduce((s, xv, c) => s + w[r * x.length + c]! * xv, 0));
const norm = (x: M, g: ArrayLike<number>): M => {
  const r = 1 / Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + 1e-6);
  return x.map((v, i) => v * r * g[i]!);
};
/** Qwen3 rotary on a head of 4: pairs (0, 2) and (1, 3), frequencies 1 and 100^(-1/2). */
const rot = (x: M, pos: number): M => {
  const f = [1, 100 ** -0.5];
  const y = x.slice();
  for (let i = 0; i < 2; i++) {
    const c = Math.cos(pos * f[i]!), s = Math.sin(pos * f[i]!);
    y[i] = x[i]! * c - x[i + 2]! * s;
    y[i + 2] = x[i + 2]! * c + x[i]! * s;
  }
  return y;
};
function handDraft(W: Map<string, Float64Array>, ctx: M[], ctxPos: number[], anchor: number, p0: number, embed: (id: number) => M, head: (h: M) => M): { tokens: number[]; hidden: M[] } {
  const w = (n: string) => W.get(n)!;
  const c = ctx.map((t) => norm(mv(w('fc.weight'), 4, t), w('hidden_norm.weight')));
  const kv = (x: M, pos: number) => ({ k: rot(norm(mv(w('layers.0.self_attn.k_proj.weight'), 4, x), w('layers.0.self_attn.k_norm.weight')), pos), v: mv(w('layers.0.self_attn.v_proj.weight'), 4, x) });
  const x0 = [embed(anchor), embed(5)];
  const h = x0.map((x) => norm(x, w('layers.0.input_layernorm.weight')));
  const rows = [...c.map((cj, j) => kv(cj, ctxPos[j]!)), ...h.map((hs, s) => kv(hs, p0 + s))];
  const hidden = x0.map((x, s) => {
    const q = mv(w('layers.0.self_attn.q_proj.weight'), 8, h[s]!);
    const att: M = [];
    for (const hd of [0, 1]) {
      const qh = rot(norm(q.slice(4 * hd, 4 * hd + 4), w('layers.0.self_attn.q_norm.weight')), p0 + s);
      const e = rows.map((r) => Math.exp(qh.reduce((a, v, i) => a + v * r.k[i]!, 0) / 2));
      const z = e.reduce((a, b) => a + b, 0);
      for (let i = 0; i < 4; i++) att.push(rows.reduce((a, r, j) => a + (e[j]! / z) * r.v[i]!, 0));
    }
    const y = x.map((v, i) => v + mv(w('layers.0.self_attn.o_proj.weight'), 4, att)[i]!);
    const m = norm(y, w('layers.0.post_attention_layernorm.weight'));
    const g = mv(w('layers.0.mlp.gate_proj.weight'), 3, m), u = mv(w('layers.0.mlp.up_proj.weight'), 3, m);
    const d = mv(w('layers.0.mlp.down_proj.weight'), 4, g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!));
    return norm(y.map((v, i) => v + d[i]!), w('norm.weight'));
  });
  const tokens: number[] = [];
  let prev = anchor;
  for (const hs of hidden) {
    const e = [w('markov_head.markov_w1.weight')[2 * prev]!, w('markov_head.markov_w1.weight')[2 * prev + 1]!];
    const l = head(hs).map((v, t) => v + mv(w('markov_head.markov_w2.weight'), 6, e)[t]!);
    prev = l.indexOf(Math.max(...l));
    tokens.push(prev);
  }
  return { tokens, hidden };
}

test('reference forward = the tiny computation written out by hand (GQA, one layer, block 2)', () => {
  const cfg = tinyConfig();
  for (const seed of [1, 2, 3]) {
    const W = randomWeights(cfg, seed);
    const rnd = xorshift(100 + seed);
    const E = Array.from({ length: 6 }, () => Array.from({ length: 4 }, () => rnd() * 2 - 1));
    const L = Float64Array.from({ length: 24 }, () => rnd() * 4 - 2);
    const ctx = Array.from({ length: 3 }, () => Array.from({ length: 4 }, () => rnd() * 2 - 1));
    const head = (h: ArrayLike<number>) => Array.from({ length: 6 }, (_, t) => Array.from(h).reduce((s, v, i) => s + L[t * 4 + i]! * v, 0));
    const input: DraftInput = { context: ctx.map((c) => Float64Array.from(c)), contextPositions: [0, 1, 2], anchor: 2, anchorPosition: 3, embed: (id) => Float64Array.from(E[id]!), lmHead: (h) => Float64Array.from(head(h)) };
    const got = draftBlock(cfg, (n) => W.get(n)!, input);
    const want = handDraft(W, ctx, [0, 1, 2], 2, 3, (id) => E[id]!, head);
    assert.deepEqual(got.tokens, want.tokens);
    for (let s = 0; s < 2; s++) for (let i = 0; i < 4; i++) assert.ok(Math.abs(got.hidden[s]![i]! - want.hidden[s]![i]!) < 1e-12, `seed ${seed} slot ${s}[${i}]`);
    assert.equal(got.confidence!.length, 2);
  }
});

/** A one-layer MLA drafter: hidden 4, 2 heads (nope 2, rope 4, v 2), q rank 3, kv rank 2, YaRN x4 over 8 positions. */
function tinyMlaConfig(): DrafterConfig {
  const j = drafterConfigJson('inferact', 'tiny') as Record<string, unknown>;
  Object.assign(j, { hidden_size: 4, intermediate_size: 3, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 2, vocab_size: 6, mask_token_id: 5 });
  Object.assign(j, { q_lora_rank: 3, kv_lora_rank: 2, qk_nope_head_dim: 2, qk_rope_head_dim: 4, v_head_dim: 2, markov_rank: 2, block_size: 2 });
  Object.assign(j, { target_layer_ids: [0], num_target_layers: 1, target_hidden_size: 4, rms_norm_eps: 1e-6 });
  j.rope_parameters = { rope_type: 'yarn', rope_theta: 100, factor: 4, original_max_position_embeddings: 8, beta_fast: 32, beta_slow: 1, mscale: 1, mscale_all_dim: 1 };
  return parseDrafterConfig(j, 'tiny-mla/config.json');
}

/** The same written out for tinyMlaConfig's sizes: DeepSeek's interleaved rotary pairs with YaRN's frequencies and amplitude. */
function handMla(cfg: DrafterConfig, W: Map<string, Float64Array>, ctx: M[], ctxPos: number[], anchor: number, p0: number, embed: (id: number) => M): M[] {
  const w = (n: string) => W.get(n)!;
  const r = makeRope(4, 100, cfg.rope.yarn);
  const rotI = (x: M, pos: number): M => {
    const y = x.slice();
    for (let i = 0; i < 2; i++) {
      const c = Math.cos(pos * r.freqs[i]!) * r.amplitude, s = Math.sin(pos * r.freqs[i]!) * r.amplitude;
      y[2 * i] = x[2 * i]! * c - x[2 * i + 1]! * s;
      y[2 * i + 1] = x[2 * i + 1]! * c + x[2 * i]! * s;
    }
    return y;
  };
  const a = 'layers.0.self_attn.';
  const kv = (x: M, pos: number) => {
    const k = mv(w(`${a}kv_a_proj_with_mqa.weight`), 6, x);
    const kvb = mv(w(`${a}kv_b_proj.weight`), 8, norm(k.slice(0, 2), w(`${a}kv_a_layernorm.weight`)));
    return { pe: rotI(k.slice(2), pos), kvb };
  };
  const c = ctx.map((t) => norm(mv(w('context_proj.weight'), 4, t), w('context_norm.weight')));
  const x0 = [embed(anchor), embed(5)];
  const h = x0.map((x) => norm(x, w('layers.0.input_layernorm.weight')));
  const rows = [...c.map((cj, j) => kv(cj, ctxPos[j]!)), ...h.map((hs, s) => kv(hs, p0 + s))];
  const scale = yarnScaleFactor(cfg.rope.yarn) / Math.sqrt(6);
  return x0.map((x, s) => {
    const q = mv(w(`${a}q_b_proj.weight`), 12, norm(mv(w(`${a}q_a_proj.weight`), 3, h[s]!), w(`${a}q_a_layernorm.weight`)));
    const att: M = [];
    for (const hd of [0, 1]) {
      const qn = q.slice(6 * hd, 6 * hd + 2), qr = rotI(q.slice(6 * hd + 2, 6 * hd + 6), p0 + s);
      const e = rows.map((row) => Math.exp(scale * (qn[0]! * row.kvb[4 * hd]! + qn[1]! * row.kvb[4 * hd + 1]! + qr.reduce((acc, v, i) => acc + v * row.pe[i]!, 0))));
      const z = e.reduce((u, v) => u + v, 0);
      for (const i of [2, 3]) att.push(rows.reduce((acc, row, j) => acc + (e[j]! / z) * row.kvb[4 * hd + i]!, 0));
    }
    const y = x.map((v, i) => v + mv(w(`${a}o_proj.weight`), 4, att)[i]!);
    const m = norm(y, w('layers.0.post_attention_layernorm.weight'));
    const g = mv(w('layers.0.mlp.gate_proj.weight'), 3, m), u = mv(w('layers.0.mlp.up_proj.weight'), 3, m);
    const d = mv(w('layers.0.mlp.down_proj.weight'), 4, g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!));
    return norm(y.map((v, i) => v + d[i]!), w('final_norm.weight'));
  });
}

test('reference forward = the tiny computation written out by hand (MLA with YaRN, one layer, block 2)', () => {
  const cfg = tinyMlaConfig();
  assert.ok(yarnScaleFactor(cfg.rope.yarn) > 1, 'YaRN scales the scores');
  for (const seed of [4, 5]) {
    const W = randomWeights(cfg, seed);
    const rnd = xorshift(200 + seed);
    const E = Array.from({ length: 6 }, () => Array.from({ length: 4 }, () => rnd() * 2 - 1));
    const ctx = Array.from({ length: 3 }, () => Array.from({ length: 4 }, () => rnd() * 2 - 1));
    const head = (h: ArrayLike<number>) => Array.from({ length: 6 }, (_, t) => Array.from(h).reduce((s2, v, i) => s2 + E[t]![i]! * v, 0));
    const input: DraftInput = { context: ctx.map((c) => Float64Array.from(c)), contextPositions: [4, 5, 6], anchor: 1, anchorPosition: 7, embed: (id) => Float64Array.from(E[id]!), lmHead: (h) => Float64Array.from(head(h)) };
    const got = draftBlock(cfg, (n) => W.get(n)!, input);
    const want = handMla(cfg, W, ctx, [4, 5, 6], 1, 7, (id) => E[id]!);
    for (let s2 = 0; s2 < 2; s2++) for (let i = 0; i < 4; i++) assert.ok(Math.abs(got.hidden[s2]![i]! - want[s2]![i]!) < 1e-12, `seed ${seed} slot ${s2}[${i}]: ${got.hidden[s2]![i]} vs ${want[s2]![i]}`);
  }
});

/** The drafter's weights from its safetensors, as float64. */
function fileWeights(dir: string): { cfg: DrafterConfig; w: DraftWeights; read: Set<string> } {
  const d = loadDrafter(dir);
  const cache = new Map<string, Float64Array>();
  const read = new Set<string>();
  return {
    cfg: d.config,
    read,
    w: (name) => {
      read.add(name);
      if (!cache.has(name)) {
        const b = readTensorBytes(d.entries!.get(name)!);
        const v = new Float64Array(b.length / 2);
        for (let i = 0; i < v.length; i++) v[i] = bf16ToF32(b.readUInt16LE(2 * i));
        cache.set(name, v);
      }
      return cache.get(name)!;
    },
  };
}

test('the synthesized layouts draft: slots, block masks, context masks, confidence', async () => {
  for (const layout of ['inferact', 'inferact-block5', 'radixark', 'redhatai'] as DrafterLayout[]) {
    const dir = path.join(tmp, layout);
    await synthDrafter({ layout, out: dir });
    const { cfg, w, read } = fileWeights(dir);
    const rnd = xorshift(7);
    const E = Array.from({ length: cfg.vocabSize }, () => Float64Array.from({ length: cfg.hiddenSize }, () => rnd() * 2 - 1));
    const ctxRow = () => Float64Array.from({ length: cfg.taps.length * cfg.targetHiddenSize }, () => rnd() * 2 - 1);
    const context = [ctxRow(), ctxRow(), ctxRow()];
    const embed = cfg.embedding === 'own' ? (id: number) => w('embed_tokens.weight').slice(id * cfg.hiddenSize, (id + 1) * cfg.hiddenSize) : (id: number) => E[id]!;
    const lmHead = cfg.lmHead === 'own' ? (h: Float64Array) => Float64Array.from({ length: cfg.vocabSize }, (_, t) => h.reduce((s, v, i) => s + w('lm_head.weight')[t * cfg.hiddenSize + i]! * v, 0)) : (h: Float64Array) => Float64Array.from({ length: cfg.vocabSize }, (_, t) => h.reduce((s, v, i) => s + E[t]![i]! * v, 0));
    const base: DraftInput = { context, contextPositions: [10, 11, 12], anchor: 7, anchorPosition: 13, embed, lmHead };
    const out = draftBlock(cfg, w, base);
    assert.equal(out.tokens.length, cfg.block, layout);
    assert.equal(out.hidden.length, cfg.slots === 'next' ? cfg.block : cfg.block + 1, layout);
    assert.ok(out.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < cfg.vocabSize), layout);
    assert.ok(out.confidence!.every((p) => p > 0 && p < 1), layout);
    // a row at the anchor's position or later is not attended
    const later = draftBlock(cfg, w, { ...base, context: [...context, ctxRow()], contextPositions: [10, 11, 12, 13] });
    assert.deepEqual(later.hidden, out.hidden, `${layout}: context rows from the anchor on are masked`);
    // causal blocks: slot 0 does not see the slots after it; bidirectional ones do
    const other = draftBlock({ ...cfg, maskTokenId: (cfg.maskTokenId + 1) % cfg.vocabSize }, w, base);
    assert.equal(other.hidden[0]!.every((v, i) => v === out.hidden[0]![i]), cfg.blockAttention === 'causal', `${layout}: block attention ${cfg.blockAttention}`);
    // Inferact's files carry a copy of K3's embedding: never read (the embedding is K3's)
    if (cfg.redundantEmbedding) assert.ok(!read.has('embed_tokens.weight'), `${layout}: the embedding copy was read`);
  }
});
