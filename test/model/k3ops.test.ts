// Op-level fixtures from a PyTorch reference of every K3 block (../shared/realdata/k3-ops, taken from
// the public C99 engine kimi-k3-in-c, Apache-2.0). Tolerance as stated there: abs 1e-5 + rel 1e-4.
// Plus the real K3 MXFP4 expert bytes, which must decode exactly.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { REALDATA, f32Tensor, memoryStore, worstExcess, type MemTensor } from '../helpers.js';
import { rmsNorm, gatedAct, linear, type Activation } from '../../src/model/ops.js';
import { shortConvStep, kdaDecay, kdaForward, newKdaState, type KdaParams } from '../../src/model/kda.js';
import { kdaRecurStep } from '../../src/graph/reference.js';
import { route } from '../../src/model/router.js';
import { attnResMix, foldWeights } from '../../src/model/attnres.js';
import { mlaForward, MlaCache } from '../../src/model/mla.js';
import { moeForward } from '../../src/model/moe.js';
import { parseConfig } from '../../src/checkpoint/config.js';
import { makeBlock } from '../../src/model/decoder.js';
import { REF_COMPUTE } from '../../src/graph/compute.js';
import { k3Layer } from '../../src/model/k3.js';
import { SequenceState } from '../../src/model/state.js';
import { decodeRow } from '../../src/kernels/ref.js';
import type { WeightView } from '../../src/formats/weight.js';
import { residentMat, type Mat } from '../../src/store/mat.js';

const DIR = path.join(REALDATA, 'k3-ops');
const MANIFEST = JSON.parse(fs.readFileSync(path.join(DIR, 'MANIFEST.json'), 'utf8'));
const ABS = MANIFEST.tolerance.fp32_abs as number;
const REL = MANIFEST.tolerance.fp32_rel as number;

type Arr = { shape: number[]; data: number[] };
type Fixture = Record<string, unknown>;
function load(name: string): Fixture {
  return JSON.parse(fs.readFileSync(path.join(DIR, `${name}.json`), 'utf8'));
}
function arr(f: Fixture, k: string): Float32Array {
  return Float32Array.from((f[k] as Arr).data);
}
function view(f: Fixture, k: string): Mat {
  const a = f[k] as Arr;
  const d = Float32Array.from(a.data);
  return residentMat({ name: k, format: 'f32', rows: a.shape[0]!, cols: a.shape[1]!, data: new Uint8Array(d.buffer) });
}
function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string, abs = ABS): void {
  const r = worstExcess(got, want, abs, REL);
  assert.ok(r.excess <= 0, `${what}: max |diff| ${r.maxAbs} at ${r.at} exceeds abs ${abs} + rel ${REL}`);
}

/**
 * The absolute tolerance for an output whose small elements are differences of terms as large as
 * the output's RMS: 8 f32 ulps at that RMS, where that is more than the fixture's abs. The MoE's
 * output has RMS 64 (ulp 7.6e-6): its f32 rounding alone moves an element near zero by up to ~3e-5,
 * whatever the dot (mul + add, fused, or accumulated in float64 all differ from PyTorch's by 4.6e-5
 * at worst, and by 1.4-1.5e-5 RMS, the fused dot less than mul + add).
 */
function absAtRms(want: ArrayLike<number>): number {
  let ss = 0;
  for (let i = 0; i < want.length; i++) ss += want[i]! * want[i]!;
  const rms = Math.sqrt(ss / want.length);
  return Math.max(ABS, 8 * 2 ** (Math.floor(Math.log2(rms)) - 23));
}

const SITU: Activation = { kind: 'situ', situBeta: 4, situLinearBeta: 25 };

test('rmsnorm', () => {
  const f = load('rmsnorm');
  const x = arr(f, 'in');
  close(rmsNorm(x, 3, 128, arr(f, 'weight'), f.eps as number), arr(f, 'out'), 'rmsnorm');
});

test('situ_glu: both soft caps saturate, sigmoid on the uncapped gate', () => {
  const f = load('situ_glu');
  const x = arr(f, 'in');
  const rows = 6, n = 8;
  const g = new Float32Array(rows * n), u = new Float32Array(rows * n);
  for (let r = 0; r < rows; r++) {
    g.set(x.subarray(r * 16, r * 16 + n), r * n);
    u.set(x.subarray(r * 16 + n, r * 16 + 2 * n), r * n);
  }
  close(gatedAct(REF_COMPUTE, g, u, SITU), arr(f, 'out'), 'situ');
});

test('shortconv: prefill of 5 tokens, carried tail, then one decode step', () => {
  const f = load('shortconv');
  const C = 64, W = 4;
  const taps = arr(f, 'weight');
  const x = arr(f, 'in');
  const tail = new Float32Array((W - 1) * C);
  const out = new Float32Array(5 * C);
  for (let t = 0; t < 5; t++) shortConvStep(x, t * C, taps, tail, 0, C, W, out, t * C);
  close(out, arr(f, 'out'), 'conv out');
  // state_after is [1, C, W-1] per channel, oldest first; our tail is [W-1, C].
  const st = arr(f, 'state_after');
  const mine = new Float32Array(C * (W - 1));
  for (let j = 0; j < C; j++) for (let m = 0; m < W - 1; m++) mine[j * (W - 1) + m] = tail[m * C + j]!;
  close(mine, st, 'conv tail');
  const o2 = new Float32Array(C);
  shortConvStep(arr(f, 'in_next'), 0, taps, tail, 0, C, W, o2, 0);
  close(o2, arr(f, 'out_next'), 'conv decode step');
});

test('kda_decay: bounded gate per head, per channel dt_bias', () => {
  const f = load('kda_decay');
  const z = arr(f, 'z');
  const P = 64;
  const p: KdaParams = { heads: 4, headDim: 16, convSize: 4, gateLowerBound: f.lower_bound as number, eps: 1e-5 };
  const T = z.length / P;
  const alpha = new Float32Array(T * P);
  for (let t = 0; t < T; t++) kdaDecay(p, z, t * P, arr(f, 'A_log'), arr(f, 'dt_bias'), alpha.subarray(t * P));
  close(alpha, arr(f, 'alpha'), 'alpha');
});

for (const name of ['kda_recur1', 'kda_recur8']) {
  test(`${name}: delta rule, decay before the error, readout after the write`, () => {
    const f = load(name);
    const T = f.T as number, H = f.H as number, d = f.d_k as number;
    const q = arr(f, 'q').map((v) => v * (f.q_scale as number));
    const k = arr(f, 'k'), v = arr(f, 'v'), alpha = arr(f, 'alpha'), beta = arr(f, 'beta');
    const S = new Float32Array(H * d * d);
    const o = new Float32Array(T * H * d);
    const u = new Float32Array(d);
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const off = t * H * d;
        kdaRecurStep(S, h * d * d, d, q.subarray(off), k.subarray(off), v.subarray(off), alpha.subarray(off), beta[t * H + h]!, o.subarray(off), h * d, u);
      }
    }
    close(o, arr(f, 'out'), 'out');
    close(S, arr(f, 'state_out'), 'state');
  });
}

for (const name of ['kda_layer1', 'kda_layer8']) {
  test(`${name}: whole KDA block with full-rank gate`, async () => {
    const f = load(name);
    const T = f.T as number, H = f.H as number, d = f.d_k as number;
    const p: KdaParams = { heads: H, headDim: d, convSize: f.conv_k as number, gateLowerBound: f.lower_bound as number, eps: f.rms_eps as number };
    const st = newKdaState(p);
    const y = await kdaForward(
      REF_COMPUTE,
      p,
      {
        q: view(f, 'q_proj'), k: view(f, 'k_proj'), v: view(f, 'v_proj'),
        qConv: arr(f, 'q_conv'), kConv: arr(f, 'k_conv'), vConv: arr(f, 'v_conv'),
        fa: view(f, 'f_a'), fb: view(f, 'f_b'), b: view(f, 'b_proj'),
        gate: { full: view(f, 'g_proj') }, o: view(f, 'o_proj'),
        aLog: arr(f, 'A_log'), dtBias: arr(f, 'dt_bias'), oNorm: arr(f, 'o_norm'),
      },
      arr(f, 'in'), T, st,
    );
    close(y, arr(f, 'out'), 'out');
    close(st.S, arr(f, 'state_out'), 'state');
  });
}

test('router: selection on biased scores, weights from unbiased ones', async () => {
  const f = load('router');
  const E = f.n_experts as number, K = f.top_k as number;
  const x = arr(f, 'in');
  const T = x.length / 128;
  const logits = await linear(REF_COMPUTE, view(f, 'gate_weight'), x, T);
  const r = route({ experts: E, topK: K, groups: 1, topkGroup: 1, renormalize: true, scaling: 1, biasedWeights: false }, logits, arr(f, 'bias'), T);
  const idx = (f.topk_idx as Arr).data;
  const w = (f.topk_weight as Arr).data;
  for (let t = 0; t < T; t++) {
    // Compare as sets with their weights (the reference's order within a row is unspecified).
    const want = new Map<number, number>();
    for (let j = 0; j < K; j++) want.set(idx[t * K + j]!, w[t * K + j]!);
    for (let j = 0; j < K; j++) {
      const e = r.ids[t]![j]!;
      assert.ok(want.has(e), `token ${t}: expert ${e} not in the reference's choice ${[...want.keys()]}`);
      close([r.weights[t]![j]!], [want.get(e)!], `token ${t} weight of expert ${e}`);
    }
  }
});

test('attnres: RMS-normalized keys, raw values, 9 sources', () => {
  const f = load('attnres');
  const cur = arr(f, 'prefix_sum');
  const br = arr(f, 'block_residual'); // [T, m, D]
  const T = 4, D = 128, m = 8;
  const snaps = Array.from({ length: m }, (_, i) => {
    const s = new Float32Array(T * D);
    for (let t = 0; t < T; t++) s.set(br.subarray((t * m + i) * D, (t * m + i + 1) * D), t * D);
    return s;
  });
  close(attnResMix(snaps, cur, T, D, foldWeights(arr(f, 'norm_weight'), arr(f, 'proj_weight')), f.eps as number), arr(f, 'out'), 'mix');
});

test('mla: gated NoPE MLA from the latent cache', async () => {
  const f = load('mla');
  const H = f.n_heads as number, dn = f.qk_nope as number, dr = f.qk_rope as number, dv = f.v_head as number, Lk = f.kv_lora as number;
  const x = arr(f, 'in');
  const T = x.length / 128;
  const cache = new MlaCache(Lk, dr);
  const y = await mlaForward(
    REF_COMPUTE,
    { heads: H, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: Lk, scale: f.scale as number, latentNormEps: f.rms_eps as number, rope: null },
    {
      q: { a: view(f, 'q_a_proj_weight'), norm: arr(f, 'q_a_layernorm_weight'), b: view(f, 'q_b_proj_weight') },
      kva: view(f, 'kv_a_proj_with_mqa_weight'), kvaNorm: arr(f, 'kv_a_layernorm_weight'), kvb: view(f, 'kv_b_proj_weight'),
      o: view(f, 'o_proj_weight'), gate: view(f, 'g_proj_weight'),
    },
    x, T, cache,
  );
  close(cache.lat.subarray(0, T * Lk), arr(f, 'kv_latent'), 'latent cache');
  close(cache.rope.subarray(0, T * dr), arr(f, 'k_rope'), 'rope key cache');
  close(y, arr(f, 'out'), 'out');
});

test('moe: latent MoE, norm on the aggregate, shared experts on the full-width input', async () => {
  const f = load('moe');
  const x = arr(f, 'in');
  const T = x.length / 128;
  const y = await moeForward(
    REF_COMPUTE,
    { experts: 8, topK: 2, groups: 1, topkGroup: 1, renormalize: true, scaling: 1, biasedWeights: false, act: SITU, eps: f.rms_eps as number },
    {
      gate: view(f, 'gate_weight'), bias: arr(f, 'e_score_correction_bias'),
      shared: { gate: view(f, 'shared_w1_weight'), up: view(f, 'shared_w3_weight'), down: view(f, 'shared_w2_weight') },
      latent: { down: view(f, 'down_weight'), up: view(f, 'up_weight'), norm: arr(f, 'norm_weight') },
    },
    x, T,
    {
      begin: (ids) => async (use) => use(ids.map((e) => ({ expert: e, w: { gate: view(f, `experts_${e}_w1_weight`), up: view(f, `experts_${e}_w3_weight`), down: view(f, `experts_${e}_w2_weight`) } }))),
      next: async () => null,
    },
  );
  close(y, arr(f, 'out'), 'out', absAtRms(arr(f, 'out')));
});

/** A K3 config (nested, official field names) from the fixtures' flat MANIFEST. */
function manifestConfig() {
  const c = MANIFEST.config;
  const text = {
    model_type: 'kimi_linear', vocab_size: c.vocab_size, hidden_size: c.hidden_size, num_hidden_layers: c.num_hidden_layers,
    rms_norm_eps: c.rms_norm_eps, hidden_act: 'situ', activation_situ_beta: c.situ_beta, activation_situ_linear_beta: c.situ_linear_beta,
    attn_res_block_size: c.attn_res_block_size, first_k_dense_replace: c.first_k_dense_replace, moe_layer_freq: 1,
    intermediate_size: c.intermediate_size, moe_intermediate_size: c.moe_intermediate_size, routed_expert_hidden_size: c.routed_expert_hidden_size,
    latent_moe_use_norm: true, num_experts: c.num_experts, num_experts_per_token: c.num_experts_per_token, num_shared_experts: c.num_shared_experts,
    moe_router_activation_func: 'sigmoid', moe_renormalize: true, routed_scaling_factor: c.routed_scaling_factor, num_expert_group: 1, topk_group: 1,
    num_attention_heads: c.num_attention_heads, q_lora_rank: c.q_lora_rank, kv_lora_rank: c.kv_lora_rank, qk_nope_head_dim: c.qk_nope_head_dim,
    qk_rope_head_dim: c.qk_rope_head_dim, v_head_dim: c.v_head_dim, mla_use_nope: true, mla_use_output_gate: true, tie_word_embeddings: false,
    linear_attn_config: { full_attn_layers: c.full_attn_layers, num_heads: c.kda_num_heads, head_dim: c.kda_head_dim, short_conv_kernel_size: 4, gate_lower_bound: c.gate_lower_bound, use_full_rank_gate: true },
  };
  // The fixtures' reference uses rms_norm_eps for the MLA latent norms (the C engine's choice).
  return parseConfig({ model_type: 'kimi_k3', text_config: text }, 'MANIFEST.json', { mlaLatentNormEps: 'config' });
}

/** Fixture key -> official tensor name under layers.{l}. */
function officialName(key: string, l: number): string {
  const p = `language_model.model.layers.${l}.`;
  let m: RegExpExecArray | null;
  if ((m = /^mlp_experts_(\d+)_(w[123])_weight$/.exec(key))) return `${p}block_sparse_moe.experts.${m[1]}.${m[2]}.weight`;
  const shared: Record<string, string> = { mlp_shared_w1_weight: 'gate_proj', mlp_shared_w3_weight: 'up_proj', mlp_shared_w2_weight: 'down_proj' };
  if (shared[key]) return `${p}block_sparse_moe.shared_experts.${shared[key]}.weight`;
  const moe: Record<string, string> = {
    mlp_gate_weight: 'gate.weight', mlp_e_score_correction_bias: 'gate.e_score_correction_bias',
    mlp_down_weight: 'routed_expert_down_proj.weight', mlp_up_weight: 'routed_expert_up_proj.weight', mlp_norm_weight: 'routed_expert_norm.weight',
  };
  if (moe[key]) return `${p}block_sparse_moe.${moe[key]}`;
  if (key === 'self_attn_A_log') return `${p}self_attn.A_log`;
  if (key === 'self_attn_dt_bias') return `${p}self_attn.dt_bias`;
  if ((m = /^self_attn_(.+)_weight$/.exec(key))) return `${p}self_attn.${m[1]}.weight`;
  if ((m = /^(.+)_weight$/.exec(key))) return `${p}${m[1]}.weight`;
  throw new Error(`unmapped fixture key ${key}`);
}

for (const name of ['layer_kda', 'layer_mla']) {
  test(`${name}: one whole K3 layer with Attention Residuals through the real store and layer code`, async () => {
    const f = load(name);
    const l = f.layer_idx as number;
    const cfg = manifestConfig();
    const tensors: Record<string, MemTensor> = {};
    for (const [k, v] of Object.entries(f)) {
      if (typeof v !== 'object' || v === null || !('data' in v) || ['in', 'out', 'block_residual_in', 'block_residual_out'].includes(k)) continue;
      tensors[officialName(k, l)] = f32Tensor((v as Arr).data, (v as Arr).shape);
    }
    const block = makeBlock(cfg, memoryStore(cfg, tensors), REF_COMPUTE);
    const D = 128;
    const x = arr(f, 'in');
    const T = x.length / D;
    const br = arr(f, 'block_residual_in');
    const m = br.length / (T * D);
    const split = (a: Float32Array, n: number) =>
      Array.from({ length: n }, (_, i) => {
        const s = new Float32Array(T * D);
        for (let t = 0; t < T; t++) s.set(a.subarray((t * n + i) * D, (t * n + i + 1) * D), t * D);
        return s;
      });
    const B = split(br, m);
    const y = await k3Layer(block, l, x, B, T, new SequenceState(cfg));
    close(y, arr(f, 'out'), 'layer out');
    const bo = arr(f, 'block_residual_out');
    const mo = bo.length / (T * D);
    assert.equal(B.length, mo, 'snapshot count');
    split(bo, mo).forEach((s, i) => close(B[i]!, s, `snapshot ${i}`));
  });
}

test('real K3 MXFP4 expert bytes decode exactly (low nibble = even column, E8M0 bias 127)', () => {
  const f = JSON.parse(fs.readFileSync(path.join(REALDATA, 'k3-mxfp4-real.json'), 'utf8'));
  const rows = f.rows as number, cols = f.logical_width as number;
  const packed = Uint8Array.from(f.packed.data as number[]);
  const scales = Uint8Array.from(f.scales.data as number[]);
  const w: WeightView = { name: 'expert', format: 'mxfp4', rows, cols, data: packed, scale: scales };
  const want = f.expected.data as number[];
  const row = new Float32Array(cols);
  let mismatches = 0;
  for (let r = 0; r < rows; r++) {
    decodeRow(w, r, row);
    // Exact, including the sign of zero (code 8 is -0).
    for (let c = 0; c < cols; c++) if (!Object.is(row[c], want[r * cols + c])) mismatches++;
  }
  assert.equal(mismatches, 0);
  // The swapped-nibble reading differs (the fixture pins the order).
  decodeRow(w, 0, row);
  const swapped = f.expected_swapped_nibbles.first64 as number[];
  assert.notDeepEqual(Array.from(row.subarray(0, 64)), swapped);
});
