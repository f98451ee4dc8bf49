// The GGUF writer of the llama.cpp bench (bench/gguf/): header, typed metadata, tensor infos,
// alignment and data read back by a minimal reader; exact f16 rounding; the lossless MXFP4 repack
// (checkpoint layout <-> ggml block_mxfp4); the K3 checkpoint -> GGUF converter's derived tensors.
// Every file we write is also parsed by an independent reader, @huggingface/gguf, whose metadata
// (keys, types, values), tensor infos (names, shapes, types, offsets) and data offset must match
// what we wrote. When node-llama-cpp is installed, a tiny K3 also runs through llama.cpp and must
// agree with us.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { E2M1_TABLE, e8m0ToF32, f16ToF32 } from '../../src/formats/dtypes.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { gguf as hfGguf, GGMLQuantizationType, GGUFValueType } from '@huggingface/gguf';
import {
  GGML_TYPE,
  GGUF_TYPE,
  GgufMeta,
  MXFP4_BLOCK_BYTES,
  ggmlBytes,
  readGgufHeader,
  readGgufTensor,
  writeGguf,
  type GgufTensorSpec,
} from '../../bench/gguf/format.js';
import { decodeFloats, f32ToF16Bits, ggmlMxfp4Values, ggmlToMxfp4, mxfp4ToGgml } from '../../bench/gguf/encodings.js';
import { convertK3ToGguf, kvbType } from '../../bench/gguf/convert.js';
import { LLAMA_INSTALL, agreement, cpuLlama, loadNodeLlamaCpp } from '../../bench/vs-llama-cpp.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-gguf-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

/** Deterministic bytes. */
function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

function readBytes(file: string, offset: number, n: number): Uint8Array {
  const fd = fs.openSync(file, 'r');
  try {
    const b = new Uint8Array(n);
    fs.readSync(fd, b, 0, n, offset);
    return b;
  } finally {
    fs.closeSync(fd);
  }
}

/** A GGUF as @huggingface/gguf parses it (numbers where ours has numbers, bigints for 64-bit ints). */
interface HfGguf {
  version: unknown;
  tensorCount: unknown;
  kvCount: unknown;
  /** Metadata in file order: GGUF value type, element type of an array, value. */
  meta: [key: string, { type: number; subType?: number; value: unknown }][];
  tensors: { name: string; ne: number[]; type: number; relOffset: number }[];
  dataOffset: number;
  /** End of the tensor infos (before the padding to the data section). */
  headerEnd: number;
}

async function hfParse(file: string): Promise<HfGguf> {
  const r = await hfGguf(file, { allowLocalFile: true, typedMetadata: true });
  const typed = r.typedMetadata as unknown as Record<string, { type: number; subType?: number; value: unknown }>;
  const { version, tensor_count, kv_count, ...rest } = typed;
  return {
    version: version!.value,
    tensorCount: tensor_count!.value,
    kvCount: kv_count!.value,
    meta: Object.entries(rest),
    tensors: r.tensorInfos.map((t) => ({ name: t.name, ne: t.shape.map(Number), type: t.dtype, relOffset: Number(t.offset) })),
    dataOffset: Number(r.tensorDataOffset),
    headerEnd: r.tensorInfoByteRange[1],
  };
}

/** The name our constants give a code (GGUF_TYPE / GGML_TYPE), to compare with @huggingface/gguf's enums. */
const nameOf = (table: Record<string, number>, code: number) => Object.keys(table).find((k) => table[k] === code);

/** What @huggingface/gguf must read back for a value we wrote: f32 values come back rounded. */
function expectedValue(type: number, v: unknown): unknown {
  return type === GGUF_TYPE.FLOAT32 ? Math.fround(v as number) : v;
}

/** Bytes of a ggml tensor, sized here independently of bench/gguf/format.ts's ggmlBytes. */
function tensorBytes(type: number, ne: number[]): number {
  const n = ne.reduce((a, b) => a * b, 1);
  const size: Record<number, number> = { [GGMLQuantizationType.F32]: 4, [GGMLQuantizationType.F16]: 2, [GGMLQuantizationType.BF16]: 2 };
  if (type === GGMLQuantizationType.MXFP4) return (n / 32) * 17; // 32 elements: 1 E8M0 byte + 16 bytes of nibbles
  assert.ok(size[type] !== undefined, `no size for ggml type ${type}`);
  return n * size[type]!;
}

test('f32 -> f16 rounds to nearest even and round-trips every half', () => {
  for (let h = 0; h < 0x10000; h++) {
    const v = f16ToF32(h);
    if (Number.isNaN(v)) {
      assert.ok((f32ToF16Bits(v) & 0x7c00) === 0x7c00 && (f32ToF16Bits(v) & 0x3ff) !== 0);
      continue;
    }
    assert.equal(f32ToF16Bits(v), h, `half 0x${h.toString(16)}`);
  }
  assert.equal(f32ToF16Bits(1 + 2 ** -11), 0x3c00); // tie -> even (down)
  assert.equal(f32ToF16Bits(1 + 3 * 2 ** -11), 0x3c02); // tie -> even (up)
  assert.equal(f32ToF16Bits(1 + 2 ** -11 + 2 ** -20), 0x3c01); // above the tie
  assert.equal(f32ToF16Bits(65519), 0x7bff);
  assert.equal(f32ToF16Bits(65520), 0x7c00); // rounds to infinity
  assert.equal(f32ToF16Bits(-1e6), 0xfc00);
  assert.equal(f32ToF16Bits(2 ** -25), 0x0000); // tie between 0 and the smallest subnormal -> 0
  assert.equal(f32ToF16Bits(1.5 * 2 ** -25), 0x0001);
  assert.equal(f32ToF16Bits(2 ** -24 * 1023.5), 0x0400); // subnormal rounding carries into the normals
  assert.equal(f32ToF16Bits(-0), 0x8000);
  assert.equal(f32ToF16Bits(1e-45), 0x0000); // f32 subnormal
});

/** A small GGUF with every metadata type and every tensor type we write, each tensor needing padding. */
function writeSample(file: string) {
  const meta = new GgufMeta()
    .str('general.architecture', 'test')
    .u32('general.alignment', 32)
    .u32('t.u32', 4294967295)
    .i32('t.i32', -7)
    .f32('t.f32', 0.1)
    .bool('t.bool', true)
    .u64('t.u64', 2n ** 40n + 3n)
    .str('t.unicode', 'Kimi ☃ ü')
    .arr('t.arr_i32', GGUF_TYPE.INT32, [0, 1, -1, 2147483647])
    .arr('t.arr_str', GGUF_TYPE.STRING, ['a', '', 'Ċ'])
    .arr('t.arr_empty', GGUF_TYPE.STRING, [])
    .arr('t.arr_f32', GGUF_TYPE.FLOAT32, [1.5, -2])
    .set('t.u8', { type: GGUF_TYPE.UINT8, value: 200 })
    .set('t.i16', { type: GGUF_TYPE.INT16, value: -300 })
    .set('t.f64', { type: GGUF_TYPE.FLOAT64, value: Math.PI })
    .set('t.i64', { type: GGUF_TYPE.INT64, value: -(2n ** 50n) });
  // Odd sizes so that each tensor needs padding.
  const specs: { name: string; type: 0 | 1 | 30 | 39; ne: number[] }[] = [
    { name: 'a.f32', type: GGML_TYPE.F32, ne: [3, 5] },
    { name: 'b.f16', type: GGML_TYPE.F16, ne: [7] },
    { name: 'c.mxfp4', type: GGML_TYPE.MXFP4, ne: [64, 3, 2] },
    { name: 'd.bf16', type: GGML_TYPE.BF16, ne: [1, 1, 1, 9] },
  ];
  const datas = specs.map((s, i) => bytes(ggmlBytes(s.type, s.ne), i + 1));
  const tensors: GgufTensorSpec[] = specs.map((s, i) => ({ ...s, data: () => datas[i]! }));
  const w = writeGguf(file, meta, tensors);
  return { meta, specs, datas, w };
}

test('GGUF v3: header, every metadata type, tensor infos, alignment and data read back', () => {
  const file = path.join(TMP, 'small.gguf');
  const { meta, specs, datas, w } = writeSample(file);
  assert.equal(ggmlBytes(GGML_TYPE.MXFP4, [64, 3, 2]), 12 * MXFP4_BLOCK_BYTES);

  // Fixed header fields by hand.
  const head = Buffer.from(readBytes(file, 0, 24));
  assert.equal(head.toString('latin1', 0, 4), 'GGUF');
  assert.equal(head.readUInt32LE(4), 3);
  assert.equal(head.readBigUInt64LE(8), BigInt(specs.length));
  assert.equal(head.readBigUInt64LE(16), BigInt(meta.entries.size));

  const g = readGgufHeader(file);
  assert.equal(g.version, 3);
  assert.equal(g.alignment, 32);
  assert.equal(g.dataOffset, w.dataOffset);
  assert.equal(g.dataOffset % 32, 0);
  assert.equal(g.fileBytes % 32, 0);
  assert.equal(g.fileBytes, w.bytes);
  const get = (k: string) => g.meta.get(k);
  assert.deepEqual(get('general.architecture'), { type: GGUF_TYPE.STRING, value: 'test' });
  assert.deepEqual(get('t.u32'), { type: GGUF_TYPE.UINT32, value: 4294967295 });
  assert.deepEqual(get('t.i32'), { type: GGUF_TYPE.INT32, value: -7 });
  assert.deepEqual(get('t.f32'), { type: GGUF_TYPE.FLOAT32, value: Math.fround(0.1) });
  assert.deepEqual(get('t.bool'), { type: GGUF_TYPE.BOOL, value: true });
  assert.deepEqual(get('t.u64'), { type: GGUF_TYPE.UINT64, value: 2n ** 40n + 3n });
  assert.deepEqual(get('t.unicode'), { type: GGUF_TYPE.STRING, value: 'Kimi ☃ ü' });
  assert.deepEqual(get('t.arr_i32'), { type: GGUF_TYPE.ARRAY, value: [0, 1, -1, 2147483647] });
  assert.deepEqual(get('t.arr_str'), { type: GGUF_TYPE.ARRAY, value: ['a', '', 'Ċ'] });
  assert.deepEqual(get('t.arr_empty'), { type: GGUF_TYPE.ARRAY, value: [] });
  assert.deepEqual(get('t.arr_f32'), { type: GGUF_TYPE.ARRAY, value: [1.5, -2] });
  assert.deepEqual(get('t.u8'), { type: GGUF_TYPE.UINT8, value: 200 });
  assert.deepEqual(get('t.i16'), { type: GGUF_TYPE.INT16, value: -300 });
  assert.deepEqual(get('t.f64'), { type: GGUF_TYPE.FLOAT64, value: Math.PI });
  assert.deepEqual(get('t.i64'), { type: GGUF_TYPE.INT64, value: -(2n ** 50n) });
  assert.deepEqual([...g.meta.keys()], [...meta.entries.keys()], 'metadata keeps its order');

  assert.equal(g.tensors.length, specs.length);
  let prevEnd = 0;
  for (let i = 0; i < specs.length; i++) {
    const t = g.tensors[i]!;
    assert.equal(t.name, specs[i]!.name);
    assert.deepEqual(t.ne, specs[i]!.ne);
    assert.equal(t.type, specs[i]!.type);
    assert.equal(t.relOffset % 32, 0, `${t.name} aligned`);
    assert.ok(t.relOffset >= prevEnd, 'tensors do not overlap');
    assert.ok(t.relOffset - prevEnd < 32, 'padding is less than one alignment unit');
    prevEnd = t.relOffset + t.nbytes;
    assert.equal(t.offset, g.dataOffset + t.relOffset);
    assert.deepEqual(readGgufTensor(file, t), datas[i]);
  }
  // Padding bytes are zero.
  const all = fs.readFileSync(file);
  for (let i = 0; i < specs.length; i++) {
    const t = g.tensors[i]!;
    const next = i + 1 < specs.length ? g.tensors[i + 1]!.offset : all.length;
    for (let p = t.offset + t.nbytes; p < next; p++) assert.equal(all[p], 0);
  }
  assert.throws(() => writeGguf(path.join(TMP, 'bad.gguf'), meta, [{ name: 'x', type: GGML_TYPE.F32, ne: [4], data: () => new Uint8Array(15) }]), /produced 15 bytes/);
  assert.ok(!fs.existsSync(path.join(TMP, 'bad.gguf')), 'a failed write leaves no file');
});

test('GGUF v3: @huggingface/gguf reads back the metadata, tensor infos and data we wrote', async () => {
  const file = path.join(TMP, 'small-hf.gguf');
  const { meta, specs, datas, w } = writeSample(file);
  const h = await hfParse(file);
  assert.equal(h.version, 3);
  assert.equal(h.tensorCount, BigInt(specs.length));
  assert.equal(h.kvCount, BigInt(meta.entries.size));

  // Metadata: the same keys in the same order, each with the type we gave it and its value.
  assert.deepEqual(h.meta.map(([k]) => k), [...meta.entries.keys()]);
  for (const [k, got] of h.meta) {
    const want = meta.entries.get(k)!;
    assert.equal(GGUFValueType[got.type], nameOf(GGUF_TYPE, want.type), `${k}: value type`);
    if (want.type === GGUF_TYPE.ARRAY) {
      assert.equal(GGUFValueType[got.subType!], nameOf(GGUF_TYPE, want.elemType), `${k}: element type`);
      assert.deepEqual(got.value, want.values.map((v) => expectedValue(want.elemType, v)), k);
    } else {
      assert.deepEqual(got.value, expectedValue(want.type, want.value), k);
    }
  }
  // A few values spelled out, so that the comparison above cannot agree on a wrong encoding.
  const hv = new Map(h.meta.map(([k, v]) => [k, v.value]));
  assert.equal(hv.get('t.u32'), 4294967295);
  assert.equal(hv.get('t.u64'), 2n ** 40n + 3n);
  assert.equal(hv.get('t.i64'), -(2n ** 50n));
  assert.equal(hv.get('t.f64'), Math.PI);
  assert.equal(hv.get('t.unicode'), 'Kimi ☃ ü');
  assert.deepEqual(hv.get('t.arr_str'), ['a', '', 'Ċ']);

  // Tensor infos: names, dims (ne[0] innermost), types, and offsets laid out 32-aligned in order.
  assert.deepEqual(h.tensors.map((t) => t.name), specs.map((s) => s.name));
  let off = 0;
  for (let i = 0; i < specs.length; i++) {
    const t = h.tensors[i]!;
    assert.deepEqual(t.ne, specs[i]!.ne, `${t.name}: dims`);
    assert.equal(GGMLQuantizationType[t.type], nameOf(GGML_TYPE, specs[i]!.type), `${t.name}: type`);
    assert.equal(t.relOffset, off, `${t.name}: offset`);
    off = Math.ceil((off + tensorBytes(t.type, t.ne)) / 32) * 32;
  }
  // The data section starts at the first 32-byte boundary after the tensor infos, and each
  // tensor's bytes sit at the offset the independent reader gives.
  assert.equal(h.dataOffset, Math.ceil(h.headerEnd / 32) * 32);
  assert.equal(h.dataOffset, w.dataOffset);
  assert.equal(fs.statSync(file).size, h.dataOffset + off);
  for (let i = 0; i < specs.length; i++) {
    const t = h.tensors[i]!;
    assert.deepEqual(readBytes(file, h.dataOffset + t.relOffset, tensorBytes(t.type, t.ne)), datas[i], `${t.name}: data`);
  }
});

/** Our reader and @huggingface/gguf agree on a whole file (metadata, tensor infos, data offset). */
async function assertReadersAgree(file: string): Promise<void> {
  const ours = readGgufHeader(file);
  const h = await hfParse(file);
  assert.equal(h.version, ours.version);
  assert.deepEqual(h.meta.map(([k]) => k), [...ours.meta.keys()]);
  for (const [k, got] of h.meta) {
    const want = ours.meta.get(k)!;
    assert.equal(got.type, want.type, `${k}: value type`);
    assert.deepEqual(got.value, want.value, k);
  }
  assert.equal(h.dataOffset, ours.dataOffset);
  assert.equal(h.tensors.length, ours.tensors.length);
  let off = 0;
  for (let i = 0; i < h.tensors.length; i++) {
    const t = h.tensors[i]!;
    const o = ours.tensors[i]!;
    assert.deepEqual([t.name, t.ne, t.type, t.relOffset], [o.name, o.ne, o.type, o.relOffset]);
    assert.equal(t.relOffset, off, `${t.name}: offset`);
    assert.equal(tensorBytes(t.type, t.ne), o.nbytes, `${t.name}: size`);
    off = Math.ceil((off + o.nbytes) / 32) * 32;
  }
  assert.equal(fs.statSync(file).size, h.dataOffset + off);
}

test('MXFP4: checkpoint layout <-> ggml blocks is lossless and keeps every value', () => {
  // Hand-made row of 32: element i has code i % 16; scale 127 (x1).
  const packed = new Uint8Array(16);
  for (let k = 0; k < 16; k++) packed[k] = ((2 * k) % 16) | (((2 * k + 1) % 16) << 4);
  const blk = mxfp4ToGgml(packed, new Uint8Array([127]), 1, 32);
  assert.equal(blk.length, 17);
  assert.equal(blk[0], 127);
  // ggml: qs[j] low nibble = element j, high nibble = element j + 16 (same codes, since 16 ≡ 0 mod 16).
  for (let j = 0; j < 16; j++) assert.equal(blk[1 + j], (j % 16) | ((j + 16) % 16) << 4);
  // (ggml's table has no −0: code 8 decodes to +0, the same value.)
  assert.deepEqual([...ggmlMxfp4Values(blk)], Array.from({ length: 32 }, (_, i) => E2M1_TABLE[i % 16]! + 0));

  for (const [rows, cols] of [[3, 32], [5, 96], [16, 1024]] as const) {
    const p = bytes(rows * cols / 2, rows * 31 + cols);
    const s = bytes(rows * cols / 32, rows + 7).map((x) => 100 + (x % 50)); // E8M0 bytes, no 255
    const g = mxfp4ToGgml(p, s, rows, cols);
    assert.equal(g.length, rows * (cols / 32) * MXFP4_BLOCK_BYTES);
    const back = ggmlToMxfp4(g, rows, cols);
    assert.deepEqual(back.packed, p);
    assert.deepEqual(back.scale, s);
    // Same values as the checkpoint's own decode: E2M1[nibble] · 2^(scale - 127).
    const v = ggmlMxfp4Values(g);
    for (let r = 0; r < rows; r++) {
      for (let i = 0; i < cols; i++) {
        const b = p[r * (cols / 2) + (i >> 1)]!;
        const code = i & 1 ? b >> 4 : b & 15;
        const want = E2M1_TABLE[code]! * e8m0ToF32(s[r * (cols / 32) + (i >> 5)]!) + 0;
        assert.equal(v[r * cols + i], want, `row ${r} col ${i}`);
      }
    }
  }
  assert.throws(() => mxfp4ToGgml(new Uint8Array(8), new Uint8Array(1), 1, 16), /multiple of 32/);
});

test('K3 checkpoint -> GGUF: names, shapes, folded and split tensors, stacked experts', async () => {
  const dir = path.join(TMP, 'k3-bf16');
  await synthCheckpoint({ arch: 'k3', preset: 'tiny', expertsFormat: 'bf16', out: dir });
  const file = path.join(TMP, 'k3-bf16.gguf');
  const r = convertK3ToGguf(dir, file, { trunk: 'f32', experts: 'f32' });
  await assertReadersAgree(file);
  const g = readGgufHeader(file);
  const byName = new Map(g.tensors.map((t) => [t.name, t]));
  const st = indexCheckpointDir(dir);
  const hf = (n: string) => {
    const e = st.get(n)!;
    return decodeFloats(readBytes(e.file, e.offset, e.nbytes), e.dtype);
  };
  const gg = (n: string) => new Float32Array(readGgufTensor(file, byName.get(n)!).buffer);
  const meta = (k: string) => g.meta.get(k)?.value;
  assert.equal(meta('general.architecture'), 'kimi-k3');
  assert.deepEqual(meta('kimi-k3.attention.head_count_kv'), [0, 0, 0, 1, 0, 0, 0, 1, 1]);
  assert.equal((meta('tokenizer.ggml.tokens') as string[]).length, 512);
  assert.equal(r.tensors, g.tensors.length);
  const P = 'language_model.model.';

  // Linear weights keep their bytes: [out, in] -> ne [in, out].
  assert.deepEqual(byName.get('blk.0.attn_q.weight')!.ne, [128, 512]);
  assert.deepEqual(gg('blk.0.attn_q.weight'), hf(`${P}layers.0.self_attn.q_proj.weight`));
  assert.deepEqual(gg('token_embd.weight'), hf(`${P}embed_tokens.weight`));
  // Residual scores: norm ⊙ proj.
  const nw = hf(`${P}layers.2.mlp_res_norm.weight`);
  const pw = hf(`${P}layers.2.mlp_res_proj.weight`);
  assert.deepEqual(gg('blk.2.ffn_res_score.weight'), nw.map((x, i) => x * pw[i]!));
  // ssm_a = -exp(A_log[:heads]); conv taps keep their bytes.
  const al = hf(`${P}layers.1.self_attn.A_log`);
  assert.deepEqual(gg('blk.1.ssm_a'), new Float32Array(4).map((_, i) => -Math.exp(al[i]!)));
  assert.deepEqual(byName.get('blk.1.ssm_conv1d_k.weight')!.ne, [4, 1, 512]);
  assert.deepEqual(gg('blk.1.ssm_conv1d_k.weight'), hf(`${P}layers.1.self_attn.k_conv1d.weight`));
  // MLA kv_b split: k_b[h][c][n] = kv_b[h·64 + n][c], v_b[h][j][c] = kv_b[h·64 + 32 + j][c].
  const kvb = hf(`${P}layers.3.self_attn.kv_b_proj.weight`); // [4·(32+32), 64]
  const kb = gg('blk.3.attn_k_b.weight');
  const vb = gg('blk.3.attn_v_b.weight');
  assert.deepEqual(byName.get('blk.3.attn_k_b.weight')!.ne, [32, 64, 4]);
  assert.deepEqual(byName.get('blk.3.attn_v_b.weight')!.ne, [64, 32, 4]);
  for (let h = 0; h < 4; h++) {
    for (let c = 0; c < 64; c++) {
      for (let n = 0; n < 32; n++) assert.equal(kb[(h * 64 + c) * 32 + n], kvb[(h * 64 + n) * 64 + c]);
      for (let j = 0; j < 32; j++) assert.equal(vb[(h * 32 + j) * 64 + c], kvb[(h * 64 + 32 + j) * 64 + c]);
    }
  }
  // Experts stacked [in, out, E]; expert 5 of layer 4's down projection.
  assert.deepEqual(byName.get('blk.4.ffn_down_exps.weight')!.ne, [64, 64, 16]);
  assert.deepEqual(gg('blk.4.ffn_down_exps.weight').subarray(5 * 64 * 64, 6 * 64 * 64), hf(`${P}layers.4.block_sparse_moe.experts.5.w2.weight`));
  assert.deepEqual(gg('blk.4.ffn_up_exps.weight').subarray(0, 64 * 64), hf(`${P}layers.4.block_sparse_moe.experts.0.w3.weight`));

  // MXFP4 checkpoint: repacked experts, F16 trunk; the bytes go back to the checkpoint's exactly.
  const dm = path.join(TMP, 'k3-mxfp4');
  await synthCheckpoint({ arch: 'k3', preset: 'tiny', out: dm });
  const fm = path.join(TMP, 'k3-mxfp4.gguf');
  convertK3ToGguf(dm, fm, { trunk: 'f16', experts: 'mxfp4' });
  await assertReadersAgree(fm);
  const gm = readGgufHeader(fm);
  const t = gm.tensors.find((x) => x.name === 'blk.6.ffn_gate_exps.weight')!;
  assert.equal(t.type, GGML_TYPE.MXFP4);
  assert.deepEqual(t.ne, [64, 64, 16]);
  const all = readGgufTensor(fm, t);
  const stm = indexCheckpointDir(dm);
  const per = 64 * 2 * MXFP4_BLOCK_BYTES;
  for (const e of [0, 9, 15]) {
    const back = ggmlToMxfp4(all.subarray(e * per, (e + 1) * per), 64, 64);
    const pe = stm.get(`${P}layers.6.block_sparse_moe.experts.${e}.w1.weight_packed`)!;
    const se = stm.get(`${P}layers.6.block_sparse_moe.experts.${e}.w1.weight_scale`)!;
    assert.deepEqual(back.packed, readBytes(pe.file, pe.offset, pe.nbytes));
    assert.deepEqual(back.scale, readBytes(se.file, se.offset, se.nbytes));
  }
  assert.equal(gm.tensors.find((x) => x.name === 'blk.0.attn_q.weight')!.type, GGML_TYPE.F16);
  assert.equal(gm.tensors.find((x) => x.name === 'blk.1.ffn_gate_inp.weight')!.type, GGML_TYPE.F32, 'the router stays F32');
  // An F16 trunk keeps the MLA k_b / v_b out of F16 (llama.cpp's AMX buffer would take them, then abort).
  for (const n of ['attn_k_b', 'attn_v_b']) assert.equal(gm.tensors.find((x) => x.name === `blk.3.${n}.weight`)!.type, GGML_TYPE.F32, n);
  assert.equal(gm.tensors.find((x) => x.name === 'blk.3.attn_q_a.weight')!.type, GGML_TYPE.F16);
  assert.equal(kvbType('bf16'), GGML_TYPE.BF16);
  assert.equal(kvbType('f32'), GGML_TYPE.F32);
  assert.throws(() => convertK3ToGguf(dir, path.join(TMP, 'x.gguf'), { experts: 'mxfp4' }), /need MXFP4 experts in the checkpoint/);
});

test('llama.cpp (node-llama-cpp) agrees with our engine on a tiny K3', async (t) => {
  const nlc = await loadNodeLlamaCpp();
  if (!nlc) {
    t.skip(`node-llama-cpp is not installed (${LLAMA_INSTALL} installs it)`);
    return;
  }
  try {
    await (await cpuLlama(nlc)).dispose();
  } catch (e) {
    t.skip(`node-llama-cpp has no working CPU binary here: ${e instanceof Error ? e.message : e}`);
    return;
  }
  const dir = path.join(TMP, 'k3-agree');
  await synthCheckpoint({ arch: 'k3', preset: 'tiny', expertsFormat: 'bf16', out: dir });
  const file = path.join(TMP, 'k3-agree.gguf');
  convertK3ToGguf(dir, file, { trunk: 'f32', experts: 'f32' });
  const a = await agreement(nlc, dir, file, { promptLength: 12, greedy: 6, batches: [0, 1] });
  for (const c of a.cases) {
    assert.ok(c.maxAbsLogpDiff < 1e-4, `batch ${c.llamaBatch}: max |Δ log p| ${c.maxAbsLogpDiff}`);
    assert.equal(c.firstDiff, -1, `batch ${c.llamaBatch}: greedy ${c.greedyOurs} vs ${c.greedyLlama}`);
    assert.ok(c.maxAbsLogpDiffSteps < 1e-4, `batch ${c.llamaBatch}: along greedy ${c.maxAbsLogpDiffSteps}`);
  }
});
