// The tensors a DSpark drafter checkpoint holds, by name, shape and dtype, derived from its
// config (docs/DSPARK.md §4), and the check of a directory's safetensors against them: a missing,
// unexpected, misshapen or non-BF16 tensor is refused with one line naming the file and tensor.
// Names are the checkpoints' own, with no `model.` prefix:
//   k3_dspark:            context_proj, context_norm, final_norm, layers.i.self_attn.{q_a_proj, q_a_layernorm,
//                         q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}, and the
//                         embed_tokens copy of K3's embedding (never read);
//   dflash / speculators: fc, hidden_norm, norm, layers.i.self_attn.{q_proj, k_proj, v_proj, o_proj, q_norm, k_norm};
//                         speculators adds its own embed_tokens and lm_head;
//   all:                  layers.i.{input_layernorm, post_attention_layernorm, mlp.{gate,up,down}_proj},
//                         markov_head.markov_w{1,2}, confidence_head.proj.{weight,bias}, fc_norm.i (when declared).

import type { TensorEntry } from './safetensors.js';
import type { DrafterConfig, DrafterTensorSpec } from './drafter-types.js';
import { UserError } from '../util/errors.js';

export function drafterTensorSpecs(d: DrafterConfig): DrafterTensorSpec[] {
  const out: DrafterTensorSpec[] = [];
  const add = (name: string, shape: number[], use: DrafterTensorSpec['use'] = 'read') => out.push({ name, dtype: 'BF16', shape, use });
  const H = d.hiddenSize;
  const mla = d.format === 'k3_dspark';
  const ctxIn = d.taps.length * d.targetHiddenSize;
  if (d.embedding === 'own') add('embed_tokens.weight', [d.vocabSize, H]);
  if (d.redundantEmbedding) add('embed_tokens.weight', [d.vocabSize, H], 'never_read');
  if (d.tapNorm) d.taps.forEach((_, i) => add(`fc_norm.${i}.weight`, [d.targetHiddenSize]));
  add(mla ? 'context_proj.weight' : 'fc.weight', [H, ctxIn]);
  add(mla ? 'context_norm.weight' : 'hidden_norm.weight', [H]);
  for (let l = 0; l < d.numLayers; l++) {
    const p = `layers.${l}.`;
    add(`${p}input_layernorm.weight`, [H]);
    if (d.attn.kind === 'mla') {
      const a = d.attn;
      add(`${p}self_attn.q_a_proj.weight`, [a.qLoraRank, H]);
      add(`${p}self_attn.q_a_layernorm.weight`, [a.qLoraRank]);
      add(`${p}self_attn.q_b_proj.weight`, [a.heads * (a.nopeDim + a.ropeDim), a.qLoraRank]);
      add(`${p}self_attn.kv_a_proj_with_mqa.weight`, [a.kvLoraRank + a.ropeDim, H]);
      add(`${p}self_attn.kv_a_layernorm.weight`, [a.kvLoraRank]);
      add(`${p}self_attn.kv_b_proj.weight`, [a.heads * (a.nopeDim + a.vDim), a.kvLoraRank]);
      add(`${p}self_attn.o_proj.weight`, [H, a.heads * a.vDim]);
    } else {
      const a = d.attn;
      add(`${p}self_attn.q_proj.weight`, [a.heads * a.headDim, H]);
      add(`${p}self_attn.k_proj.weight`, [a.kvHeads * a.headDim, H]);
      add(`${p}self_attn.v_proj.weight`, [a.kvHeads * a.headDim, H]);
      add(`${p}self_attn.o_proj.weight`, [H, a.heads * a.headDim]);
      add(`${p}self_attn.q_norm.weight`, [a.headDim]);
      add(`${p}self_attn.k_norm.weight`, [a.headDim]);
    }
    add(`${p}post_attention_layernorm.weight`, [H]);
    add(`${p}mlp.gate_proj.weight`, [d.intermediateSize, H]);
    add(`${p}mlp.up_proj.weight`, [d.intermediateSize, H]);
    add(`${p}mlp.down_proj.weight`, [H, d.intermediateSize]);
  }
  add(mla ? 'final_norm.weight' : 'norm.weight', [H]);
  if (d.lmHead === 'own') add('lm_head.weight', [d.draftVocabSize, H]);
  add('markov_head.markov_w1.weight', [d.vocabSize, d.markov.rank]);
  add('markov_head.markov_w2.weight', [d.draftVocabSize, d.markov.rank]);
  if (d.confidence) {
    add('confidence_head.proj.weight', [1, H + (d.confidence.withMarkov ? d.markov.rank : 0)]);
    add('confidence_head.proj.bias', [1]);
  }
  return out;
}

/** Bytes of one spec. */
export function specBytes(s: { shape: number[] }): number {
  return s.shape.reduce((a, b) => a * b, 1) * 2;
}

/**
 * Check a drafter directory's tensors against its config. The redundant embedding copy may be
 * absent (it is never read); everything else must be there, exactly, and nothing more.
 */
export function checkDrafterTensors(d: DrafterConfig, entries: Map<string, TensorEntry>): void {
  const specs = drafterTensorSpecs(d);
  const want = new Map(specs.map((s) => [s.name, s]));
  for (const e of entries.values()) {
    const s = want.get(e.name);
    if (!s) throw new UserError(`${e.file}: unexpected tensor ${e.name} for this ${d.format} drafter config (${d.file}); docs/DSPARK.md lists the tensors of each layout`);
    if (e.dtype !== s.dtype) throw new UserError(`${e.file}: tensor ${e.name} is ${e.dtype}, expected ${s.dtype} (the drafters ship BF16)`);
    if (e.shape.length !== s.shape.length || e.shape.some((x, i) => x !== s.shape[i])) {
      throw new UserError(`${e.file}: tensor ${e.name} has shape [${e.shape.join(', ')}], expected [${s.shape.join(', ')}] from ${d.file}`);
    }
  }
  for (const s of specs) {
    if (s.use === 'read' && !entries.has(s.name)) throw new UserError(`${d.file}: the checkpoint lacks tensor ${s.name} (shape [${s.shape.join(', ')}]) that this config implies`);
  }
}

/** Bytes of the drafter's own KV cache per context position (f32, as the engine keeps K3's MLA cache): MLA keeps the latent and the rope key; GQA keys and values. Sliding layers count up to their window. */
export function drafterKvBytes(d: DrafterConfig, ctx: number): number {
  if (d.attn.kind === 'mla') return d.numLayers * (d.attn.kvLoraRank + d.attn.ropeDim) * 4 * ctx;
  const a = d.attn;
  const per = 2 * a.kvHeads * a.headDim * 4;
  return a.layerKinds.reduce((sum, k) => sum + per * (k === 'sliding' ? Math.min(ctx, a.slidingWindow!) : ctx), 0);
}

/** Query slots of one drafter forward: the anchor and the mask tokens after it. */
export function drafterSlots(d: DrafterConfig): number {
  return d.slots === 'next' ? d.block : d.block + 1;
}
