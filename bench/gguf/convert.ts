// A converter from one of our K3 checkpoint directories to a GGUF that llama.cpp's `kimi-k3`
// architecture loads: metadata, tensor names and shapes, the derived tensors, a stub tokenizer.
// The container is ./format.ts, the tensor encodings ./encodings.ts.
//
// A safetensors weight [out, in] (row-major) is a ggml tensor with ne = [in, out] holding the very
// same bytes, so linear weights need no transposition: only a type change. What the `kimi-k3`
// loader wants beyond that (checked against llama.cpp's kimi-k3 model and its HF converter):
//   - `<site>_res_norm.weight` and `<site>_res_proj.weight` of every Attention Residuals site are
//     used only as their product: one F32 vector `*_res_score` = norm ⊙ proj.
//   - KDA `A_log` becomes `ssm_a` = −exp(A_log) for the first `heads` entries (K3 pads it to 128).
//   - KDA conv taps [P, 1, W] are ggml [W, 1, P]: the same bytes, current input at tap W−1.
//   - MLA `kv_b_proj` [H·(nope+v), kvLora] is split per head into `attn_k_b` (ggml [nope, kvLora, H],
//     i.e. the nope rows transposed) and `attn_v_b` (ggml [kvLora, v, H]); the cache holds the latent.
//     These two are never F16 (F32 on an F16 trunk): see kvbType, an Intel AMX load failure.
//     `head_count_kv` is 1 on MLA layers and 0 on KDA layers (that is how KDA layers are marked).
//   - routed experts are stacked into 3-D `ffn_{gate,up,down}_exps` (ggml [in, out, E]).
//   - one `head_count` serves both attention kinds: MLA heads must equal KDA heads.
//   - a tokenizer must be present: we write a byte-level "gpt2" vocabulary of the model's size with
//     no merges (the benches feed token ids, so it is never used to split text).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../../src/checkpoint/config.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import type { TensorEntry } from '../../src/checkpoint/safetensors.js';
import {
  GGML_TYPE,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_TYPE,
  GgufMeta,
  MXFP4_BLOCK,
  MXFP4_BLOCK_BYTES,
  writeGguf,
  type GgmlType,
  type GgufTensorSpec,
  type WriteGgufResult,
} from './format.js';
import { decodeFloats, encodeFloats, ggmlMxfp4Values, mxfp4ToGgml } from './encodings.js';

// ---------------------------------------------------------------------------------------------
// Tokenizer stub

/** GPT-2's byte -> printable code point map (the byte-level BPE alphabet). */
function byteLevelAlphabet(): string[] {
  const keep: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Array<string>(256);
  const kept = new Set(keep);
  let extra = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(kept.has(b) ? b : 256 + extra++);
  return map;
}

/**
 * Tokenizer keys for a vocabulary of `vocab` ids: ids 0..255 are the 256 byte-level symbols (so
 * llama.cpp finds its newline token), the rest are placeholders; no merges. Enough for llama.cpp to
 * load and detokenize; the benches feed ids directly.
 */
export function stubTokenizer(meta: GgufMeta, vocab: number, bos: number | null, eos: number[]): void {
  if (vocab < 256) throw new Error(`gguf: the stub tokenizer needs a vocabulary of at least 256, got ${vocab}`);
  const alpha = byteLevelAlphabet();
  const tokens: string[] = [];
  for (let i = 0; i < vocab; i++) tokens.push(i < 256 ? alpha[i]! : `<|id_${i}|>`);
  meta.str('tokenizer.ggml.model', 'gpt2');
  meta.str('tokenizer.ggml.pre', 'default');
  meta.arr('tokenizer.ggml.tokens', GGUF_TYPE.STRING, tokens);
  meta.arr('tokenizer.ggml.token_type', GGUF_TYPE.INT32, tokens.map(() => 1));
  meta.arr('tokenizer.ggml.merges', GGUF_TYPE.STRING, []);
  if (bos !== null && bos < vocab) meta.u32('tokenizer.ggml.bos_token_id', bos);
  const e = eos.find((x) => x < vocab);
  if (e !== undefined) meta.u32('tokenizer.ggml.eos_token_id', e);
  meta.bool('tokenizer.ggml.add_bos_token', false);
  meta.bool('tokenizer.ggml.add_eos_token', false);
}

// ---------------------------------------------------------------------------------------------
// K3 checkpoint -> GGUF

export type TrunkFormat = 'f32' | 'f16' | 'bf16';
export type ExpertsGgufFormat = 'f32' | 'mxfp4';

export interface ConvertOptions {
  /** Type of every 2-D/3-D trunk matrix (embedding and lm_head included). Norms, biases, conv taps,
   *  `ssm_a`, the residual-score vectors and the router stay F32, and so do the MLA `attn_k_b` /
   *  `attn_v_b` of an F16 trunk (see kvbType). Default f32. */
  trunk?: TrunkFormat;
  /** Routed experts: F32 (from BF16 or MXFP4 checkpoint experts, exact) or MXFP4 (from MXFP4
   *  checkpoint experts, lossless repack). Default: mxfp4 when the checkpoint has MXFP4 experts. */
  experts?: ExpertsGgufFormat;
  name?: string;
}

export interface ConvertResult extends WriteGgufResult {
  trunk: TrunkFormat;
  experts: ExpertsGgufFormat;
  params: number;
}

const TRUNK_TYPE: Record<TrunkFormat, GgmlType> = { f32: GGML_TYPE.F32, f16: GGML_TYPE.F16, bf16: GGML_TYPE.BF16 };

/**
 * The type of the MLA `attn_k_b` / `attn_v_b` for a trunk type: the trunk's, except F32 instead of
 * F16. On a CPU with AMX, llama.cpp puts every F16 matrix that passes its load-time test (a
 * contiguous MUL_MAT) in the AMX buffer type, whose kernels take contiguous inputs only; the kimi-k3
 * graph multiplies `attn_k_b` by a permuted view of q (and, with flash attention, `attn_v_b` by a
 * permuted attention output), so no backend can run that node and the scheduler aborts
 * (GGML_ASSERT(*cur_backend_id != -1)). BF16 and F32 never go to the AMX buffer; F32 holds the
 * checkpoint's BF16 values exactly and adds no rounding of the activations. llama.cpp's own
 * converter writes these two in the checkpoint's type (BF16) by default.
 */
export function kvbType(trunk: TrunkFormat): GgmlType {
  return trunk === 'f16' ? GGML_TYPE.F32 : TRUNK_TYPE[trunk];
}

class CheckpointReader {
  private fds = new Map<string, number>();
  constructor(readonly entries: Map<string, TensorEntry>) {}
  entry(name: string): TensorEntry {
    const e = this.entries.get(name);
    if (!e) throw new Error(`gguf: the checkpoint has no tensor ${name}`);
    return e;
  }
  has(name: string): boolean {
    return this.entries.has(name);
  }
  bytes(name: string): Uint8Array {
    const e = this.entry(name);
    let fd = this.fds.get(e.file);
    if (fd === undefined) {
      fd = fs.openSync(e.file, 'r');
      this.fds.set(e.file, fd);
    }
    const out = new Uint8Array(e.nbytes);
    let done = 0;
    while (done < out.length) {
      const n = fs.readSync(fd, out, done, Math.min(out.length - done, 1 << 30), e.offset + done);
      if (n === 0) throw new Error(`gguf: short read of ${name} in ${e.file}`);
      done += n;
    }
    return out;
  }
  floats(name: string): Float32Array {
    return decodeFloats(this.bytes(name), this.entry(name).dtype);
  }
  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    this.fds.clear();
  }
}

/** The GGUF metadata for a K3 config (architecture `kimi-k3`). */
export function k3Metadata(cfg: ModelConfig, name: string, fileType: number): GgufMeta {
  const A = 'kimi-k3';
  const kda = cfg.kda;
  if (cfg.arch !== 'k3' || !kda || cfg.attnResBlock === null || cfg.moe.latentDim === null) throw new Error('gguf: only K3 checkpoints are converted (arch kimi-k3)');
  if (kda.heads !== cfg.mla.heads) throw new Error(`gguf: llama.cpp's kimi-k3 has one head count for KDA and MLA; this model has ${kda.heads} KDA and ${cfg.mla.heads} MLA heads`);
  if (kda.gateLowerBound === null) throw new Error('gguf: K3 needs gate_lower_bound');
  if (cfg.mla.rope !== null) throw new Error('gguf: K3 MLA is NoPE; this config has RoPE');
  if (cfg.act.kind !== 'situ' || cfg.act.situLinearBeta === null) throw new Error('gguf: K3 uses SiTU with a linear beta');
  const firstDense = cfg.layers.findIndex((L) => L.ffn === 'moe');
  if (firstDense < 0 || cfg.layers.slice(firstDense).some((L) => L.ffn !== 'moe')) throw new Error('gguf: expected leading dense layers then MoE layers');
  const m = cfg.mla;
  const meta = new GgufMeta();
  meta.str('general.architecture', A);
  meta.str('general.name', name);
  meta.u32('general.alignment', GGUF_DEFAULT_ALIGNMENT);
  meta.u32('general.file_type', fileType);
  meta.u32(`${A}.vocab_size`, cfg.vocabSize);
  meta.u32(`${A}.context_length`, Math.min(cfg.maxPositions, 1 << 20));
  meta.u32(`${A}.embedding_length`, cfg.hiddenSize);
  meta.u32(`${A}.block_count`, cfg.numLayers);
  meta.u32(`${A}.feed_forward_length`, cfg.intermediateSize);
  meta.u32(`${A}.attention.head_count`, m.heads);
  // 0 marks a KDA (recurrent) layer; MLA is served as MQA over the latent (1 KV head).
  meta.arr(`${A}.attention.head_count_kv`, GGUF_TYPE.INT32, cfg.layers.map((L) => (L.attn === 'mla' ? 1 : 0)));
  meta.f32(`${A}.attention.layer_norm_rms_epsilon`, cfg.rmsNormEps);
  if (m.qLoraRank !== null) meta.u32(`${A}.attention.q_lora_rank`, m.qLoraRank);
  meta.u32(`${A}.attention.kv_lora_rank`, m.kvLoraRank);
  meta.u32(`${A}.attention.key_length`, m.kvLoraRank + m.ropeDim);
  meta.u32(`${A}.attention.value_length`, m.kvLoraRank);
  meta.u32(`${A}.attention.key_length_mla`, m.nopeDim + m.ropeDim);
  meta.u32(`${A}.attention.value_length_mla`, m.vDim);
  meta.u32(`${A}.rope.dimension_count`, m.ropeDim);
  meta.u32(`${A}.ssm.conv_kernel`, kda.convSize);
  meta.u32(`${A}.kda.head_dim`, kda.headDim);
  meta.f32(`${A}.kda.gate_lower_bound`, kda.gateLowerBound);
  meta.u32(`${A}.expert_count`, cfg.moe.experts);
  meta.u32(`${A}.expert_used_count`, cfg.moe.topK);
  meta.u32(`${A}.expert_shared_count`, cfg.moe.shared);
  meta.u32(`${A}.expert_feed_forward_length`, cfg.moe.intermediate);
  meta.u32(`${A}.leading_dense_block_count`, firstDense);
  meta.f32(`${A}.expert_weights_scale`, cfg.moe.scaling);
  meta.bool(`${A}.expert_weights_norm`, cfg.moe.renormalize);
  meta.u32(`${A}.expert_gating_func`, 2); // sigmoid
  meta.u32(`${A}.expert_latent_length`, cfg.moe.latentDim);
  meta.f32(`${A}.activation.situ_beta`, cfg.act.situBeta);
  meta.f32(`${A}.activation.situ_linear_beta`, cfg.act.situLinearBeta);
  meta.u32(`${A}.attn_res.block_size`, cfg.attnResBlock);
  stubTokenizer(meta, cfg.vocabSize, cfg.bosTokenId, cfg.eosTokenIds);
  return meta;
}

/** Convert a K3 checkpoint directory (official layout) to a GGUF for llama.cpp's `kimi-k3`. */
export function convertK3ToGguf(dir: string, outFile: string, opts: ConvertOptions = {}): ConvertResult {
  const cfg = loadConfig(dir);
  const entries = indexCheckpointDir(dir);
  const rd = new CheckpointReader(entries);
  const trunkFmt = opts.trunk ?? 'f32';
  const TT = TRUNK_TYPE[trunkFmt];
  const TKV = kvbType(trunkFmt);
  const P = `${cfg.prefix}model.`;
  const firstMoe = cfg.layers.findIndex((L) => L.ffn === 'moe');
  const mxfp4Src = firstMoe >= 0 && rd.has(`${P}layers.${firstMoe}.block_sparse_moe.experts.0.w1.weight_packed`);
  const expFmt: ExpertsGgufFormat = opts.experts ?? (mxfp4Src ? 'mxfp4' : 'f32');
  if (expFmt === 'mxfp4' && !mxfp4Src) throw new Error('gguf: MXFP4 experts in the GGUF need MXFP4 experts in the checkpoint (a lossless repack); convert BF16 experts as f32');
  // ggml file types: 0 all F32, 1 mostly F16, 32 mostly BF16, 38 mostly MXFP4 (MoE).
  const fileType = expFmt === 'mxfp4' ? 38 : trunkFmt === 'f16' ? 1 : trunkFmt === 'bf16' ? 32 : 0;
  const meta = k3Metadata(cfg, opts.name ?? path.basename(path.resolve(dir)), fileType);
  const D = cfg.hiddenSize;
  const tensors: GgufTensorSpec[] = [];
  let params = 0;

  const shapeOf = (hf: string) => rd.entry(hf).shape;
  /** A checkpoint matrix [out, in] (BF16/F32) as a trunk matrix ggml [in, out]. */
  const mat = (gg: string, hf: string, type: GgmlType = TT) => {
    const sh = shapeOf(hf);
    if (sh.length !== 2) throw new Error(`gguf: ${hf}: expected a 2-D weight, got [${sh.join(', ')}]`);
    tensors.push({ name: gg, type, ne: [sh[1]!, sh[0]!], data: () => encodeFloats(rd.floats(hf), type) });
    params += sh[0]! * sh[1]!;
  };
  /** A vector (any shape, flattened) as F32 with ggml dims `ne`. */
  const vec = (gg: string, hf: string, ne?: number[]) => {
    const n = shapeOf(hf).reduce((a, b) => a * b, 1);
    tensors.push({ name: gg, type: GGML_TYPE.F32, ne: ne ?? [n], data: () => encodeFloats(rd.floats(hf), GGML_TYPE.F32) });
    params += n;
  };
  const derived = (gg: string, ne: number[], type: GgmlType, make: () => Float32Array) => {
    tensors.push({ name: gg, type, ne, data: () => encodeFloats(make(), type) });
    params += ne.reduce((a, b) => a * b, 1);
  };
  const resScore = (gg: string, normHf: string, projHf: string) => {
    derived(gg, [D], GGML_TYPE.F32, () => {
      const nw = rd.floats(normHf);
      const pw = rd.floats(projHf);
      const f = new Float32Array(D);
      for (let i = 0; i < D; i++) f[i] = nw[i]! * pw[i]!;
      return f;
    });
  };

  try {
    mat('token_embd.weight', `${P}embed_tokens.weight`);
    vec('output_norm.weight', `${P}norm.weight`);
    mat('output.weight', `${cfg.prefix}lm_head.weight`);
    resScore('output_res_score.weight', `${P}output_attn_res_norm.weight`, `${P}output_attn_res_proj.weight`);

    for (let l = 0; l < cfg.numLayers; l++) {
      const L = cfg.layers[l]!;
      const h = `${P}layers.${l}.`;
      const a = `${h}self_attn.`;
      const g = `blk.${l}.`;
      vec(`${g}attn_norm.weight`, `${h}input_layernorm.weight`);
      vec(`${g}ffn_norm.weight`, `${h}post_attention_layernorm.weight`);
      resScore(`${g}attn_res_score.weight`, `${h}self_attention_res_norm.weight`, `${h}self_attention_res_proj.weight`);
      resScore(`${g}ffn_res_score.weight`, `${h}mlp_res_norm.weight`, `${h}mlp_res_proj.weight`);
      if (L.attn === 'kda') {
        const k = cfg.kda!;
        const W = k.heads * k.headDim;
        mat(`${g}attn_q.weight`, `${a}q_proj.weight`);
        mat(`${g}attn_k.weight`, `${a}k_proj.weight`);
        mat(`${g}attn_v.weight`, `${a}v_proj.weight`);
        for (const x of ['q', 'k', 'v']) vec(`${g}ssm_conv1d_${x}.weight`, `${a}${x}_conv1d.weight`, [k.convSize, 1, W]);
        mat(`${g}ssm_f_a.weight`, `${a}f_a_proj.weight`);
        mat(`${g}ssm_f_b.weight`, `${a}f_b_proj.weight`);
        mat(`${g}ssm_beta.weight`, `${a}b_proj.weight`);
        derived(`${g}ssm_a`, [k.heads], GGML_TYPE.F32, () => {
          const al = rd.floats(`${a}A_log`);
          const out = new Float32Array(k.heads);
          for (let i = 0; i < k.heads; i++) out[i] = -Math.exp(al[i]!);
          return out;
        });
        vec(`${g}ssm_dt.bias`, `${a}dt_bias`);
        mat(`${g}ssm_g.weight`, `${a}g_proj.weight`);
        vec(`${g}ssm_norm.weight`, `${a}o_norm.weight`);
        mat(`${g}attn_output.weight`, `${a}o_proj.weight`);
      } else {
        const m = cfg.mla;
        if (m.qLoraRank !== null) {
          mat(`${g}attn_q_a.weight`, `${a}q_a_proj.weight`);
          vec(`${g}attn_q_a_norm.weight`, `${a}q_a_layernorm.weight`);
          mat(`${g}attn_q_b.weight`, `${a}q_b_proj.weight`);
        } else {
          mat(`${g}attn_q.weight`, `${a}q_proj.weight`);
        }
        mat(`${g}attn_kv_a_mqa.weight`, `${a}kv_a_proj_with_mqa.weight`);
        vec(`${g}attn_kv_a_norm.weight`, `${a}kv_a_layernorm.weight`);
        // kv_b [H·(nope+v), Lk]: head h's rows are nope key rows then v value rows.
        const H = m.heads;
        const Lk = m.kvLoraRank;
        const per = m.nopeDim + m.vDim;
        let kvb: Float32Array | null = null;
        const kvbOnce = () => (kvb ??= rd.floats(`${a}kv_b_proj.weight`));
        // attn_k_b: ggml [nope, Lk, H] = row-major [H][Lk][nope]: k_b[h][c][n] = kv_b[h·per + n][c].
        derived(`${g}attn_k_b.weight`, [m.nopeDim, Lk, H], TKV, () => {
          const src = kvbOnce();
          const out = new Float32Array(H * Lk * m.nopeDim);
          for (let hh = 0; hh < H; hh++) {
            for (let n = 0; n < m.nopeDim; n++) {
              const row = (hh * per + n) * Lk;
              for (let c = 0; c < Lk; c++) out[(hh * Lk + c) * m.nopeDim + n] = src[row + c]!;
            }
          }
          return out;
        });
        // attn_v_b: ggml [Lk, v, H] = row-major [H][v][Lk]: the value rows as they are.
        derived(`${g}attn_v_b.weight`, [Lk, m.vDim, H], TKV, () => {
          const src = kvbOnce();
          const out = new Float32Array(H * m.vDim * Lk);
          for (let hh = 0; hh < H; hh++) out.set(src.subarray((hh * per + m.nopeDim) * Lk, (hh * per + per) * Lk), hh * m.vDim * Lk);
          kvb = null;
          return out;
        });
        mat(`${g}attn_gate.weight`, `${a}g_proj.weight`);
        mat(`${g}attn_output.weight`, `${a}o_proj.weight`);
      }
      if (L.ffn === 'dense') {
        mat(`${g}ffn_gate.weight`, `${h}mlp.gate_proj.weight`);
        mat(`${g}ffn_up.weight`, `${h}mlp.up_proj.weight`);
        mat(`${g}ffn_down.weight`, `${h}mlp.down_proj.weight`);
      } else {
        const b = `${h}block_sparse_moe.`;
        const E = cfg.moe.experts;
        const I = cfg.moe.intermediate;
        const Lt = cfg.moe.latentDim!;
        mat(`${g}ffn_gate_inp.weight`, `${b}gate.weight`, GGML_TYPE.F32); // router stays F32
        vec(`${g}exp_probs_b.bias`, `${b}gate.e_score_correction_bias`);
        mat(`${g}ffn_routed_down.weight`, `${b}routed_expert_down_proj.weight`);
        vec(`${g}ffn_routed_norm.weight`, `${b}routed_expert_norm.weight`);
        mat(`${g}ffn_routed_up.weight`, `${b}routed_expert_up_proj.weight`);
        if (cfg.moe.shared > 0) {
          mat(`${g}ffn_gate_shexp.weight`, `${b}shared_experts.gate_proj.weight`);
          mat(`${g}ffn_up_shexp.weight`, `${b}shared_experts.up_proj.weight`);
          mat(`${g}ffn_down_shexp.weight`, `${b}shared_experts.down_proj.weight`);
        }
        // w1 gate [I, Lt], w3 up [I, Lt], w2 down [Lt, I]; stacked: ggml [in, out, E].
        for (const [gg, w, rows, cols] of [['ffn_gate_exps', 'w1', I, Lt], ['ffn_up_exps', 'w3', I, Lt], ['ffn_down_exps', 'w2', Lt, I]] as const) {
          const ne = [cols, rows, E];
          params += rows * cols * E;
          if (expFmt === 'mxfp4') {
            tensors.push({
              name: `${g}${gg}.weight`, type: GGML_TYPE.MXFP4, ne,
              data: () => {
                const per = rows * (cols / MXFP4_BLOCK) * MXFP4_BLOCK_BYTES;
                const out = new Uint8Array(per * E);
                for (let e = 0; e < E; e++) {
                  const x = `${b}experts.${e}.${w}.`;
                  const scale = rd.bytes(`${x}weight_scale`);
                  if (scale.includes(255)) throw new Error(`gguf: ${x}weight_scale holds E8M0 255 (NaN in OCP MX, 0 in our engine, 2^127 in ggml): not convertible losslessly`);
                  out.set(mxfp4ToGgml(rd.bytes(`${x}weight_packed`), scale, rows, cols), e * per);
                }
                return out;
              },
            });
          } else {
            tensors.push({
              name: `${g}${gg}.weight`, type: GGML_TYPE.F32, ne,
              data: () => {
                const out = new Float32Array(rows * cols * E);
                for (let e = 0; e < E; e++) {
                  const x = `${b}experts.${e}.${w}.`;
                  let v: Float32Array;
                  if (rd.has(`${x}weight`)) v = rd.floats(`${x}weight`);
                  else {
                    const blocks = mxfp4ToGgml(rd.bytes(`${x}weight_packed`), rd.bytes(`${x}weight_scale`), rows, cols);
                    v = ggmlMxfp4Values(blocks);
                  }
                  out.set(v, e * rows * cols);
                }
                return new Uint8Array(out.buffer);
              },
            });
          }
        }
      }
    }
    const res = writeGguf(outFile, meta, tensors);
    return { ...res, trunk: trunkFmt, experts: expFmt, params };
  } finally {
    rd.close();
  }
}
