// Which tensors make up one linear layer, and in which format (docs/spec/ARCHITECTURE.md §5):
//   `<base>.weight` BF16/F16/F32                          -> plain
//   `<base>.weight` F8_E4M3 + `<base>.weight_scale_inv`    -> fp8, 128x128 block scales (DeepSeek-V3 / K2)
//   `<base>.weight_packed` I32 + `.weight_scale` (+ `.weight_shape`) -> int4 pack-quantized (K2-Thinking)
//   `<base>.weight_packed` U8 + `.weight_scale` U8         -> mxfp4 (K3 routed experts)
// The format is decided per tensor by what the header holds, never by the model name.

import type { TensorEntry } from './safetensors.js';
import type { WeightFormat } from '../formats/weight.js';
import { UserError } from '../util/errors.js';

export interface LinearParts {
  base: string;
  format: WeightFormat;
  rows: number;
  cols: number;
  data: TensorEntry;
  scale?: TensorEntry;
  scaleDtype?: 'F32' | 'BF16' | 'F16';
}

function where(e: TensorEntry): string {
  return `${e.file}: tensor ${e.name}`;
}

export function resolveLinear(entries: Map<string, TensorEntry>, base: string, shapeHint?: [number, number]): LinearParts {
  const w = entries.get(`${base}.weight`);
  if (w) {
    if (w.shape.length !== 2) throw new UserError(`${where(w)}: expected a 2-D weight, got shape ${JSON.stringify(w.shape)}`);
    const [rows, cols] = w.shape as [number, number];
    if (w.dtype === 'F8_E4M3') {
      const s = entries.get(`${base}.weight_scale_inv`);
      if (!s) throw new UserError(`${where(w)}: F8_E4M3 weight without ${base}.weight_scale_inv`);
      const want = [Math.ceil(rows / 128), Math.ceil(cols / 128)];
      if (s.dtype !== 'F32' || s.shape.length !== 2 || s.shape[0] !== want[0] || s.shape[1] !== want[1]) {
        throw new UserError(`${where(s)}: expected F32 ${JSON.stringify(want)}, got ${s.dtype} ${JSON.stringify(s.shape)}`);
      }
      return { base, format: 'fp8', rows, cols, data: w, scale: s, scaleDtype: 'F32' };
    }
    const fmt = ({ BF16: 'bf16', F16: 'f16', F32: 'f32' } as const)[w.dtype as 'BF16' | 'F16' | 'F32'];
    if (!fmt) throw new UserError(`${where(w)}: dtype ${w.dtype} is not a supported weight dtype`);
    return { base, format: fmt, rows, cols, data: w };
  }
  const p = entries.get(`${base}.weight_packed`);
  if (!p) throw new UserError(`missing tensor ${base}.weight (no .weight or .weight_packed in the checkpoint)`);
  const s = entries.get(`${base}.weight_scale`);
  if (!s) throw new UserError(`${where(p)}: packed weight without ${base}.weight_scale`);
  if (p.shape.length !== 2 || s.shape.length !== 2) throw new UserError(`${where(p)}: packed weight and scale must be 2-D`);
  const rows = p.shape[0]!;
  if (p.dtype === 'U8') {
    // MXFP4: [N, K/2] bytes, [N, K/32] E8M0 scales.
    const cols = p.shape[1]! * 2;
    if (s.dtype !== 'U8' || s.shape[0] !== rows || s.shape[1]! * 32 !== cols) {
      throw new UserError(`${where(s)}: MXFP4 scale must be U8 [${rows}, ${cols / 32}], got ${s.dtype} ${JSON.stringify(s.shape)}`);
    }
    if (shapeHint && (shapeHint[0] !== rows || shapeHint[1] !== cols)) {
      throw new UserError(`${where(p)}: MXFP4 weight is [${rows}, ${cols}], expected ${JSON.stringify(shapeHint)}`);
    }
    return { base, format: 'mxfp4', rows, cols, data: p, scale: s, scaleDtype: undefined };
  }
  if (p.dtype === 'I32') {
    // INT4 pack-quantized: [N, ceil(K/8)] words, [N, K/32] scales, optional weight_shape [N, K].
    // The logical width comes from the model's shape (weight_shape holds the same [N, K]).
    const cols = shapeHint ? shapeHint[1] : s.shape[1]! * 32;
    if (Math.ceil(cols / 8) !== p.shape[1] || Math.ceil(cols / 32) !== s.shape[1] || s.shape[0] !== rows) {
      throw new UserError(`${where(p)}: INT4 packed ${JSON.stringify(p.shape)} / scale ${JSON.stringify(s.shape)} do not fit a [${rows}, ${cols}] weight`);
    }
    const sd = s.dtype;
    if (sd !== 'BF16' && sd !== 'F16' && sd !== 'F32') throw new UserError(`${where(s)}: INT4 scale dtype ${sd} is not BF16, F16 or F32`);
    return { base, format: 'int4', rows, cols, data: p, scale: s, scaleDtype: sd };
  }
  throw new UserError(`${where(p)}: weight_packed dtype ${p.dtype} is neither U8 (MXFP4) nor I32 (INT4)`);
}
