// `k3 pack`, planning: which tensors go in which record (the trunk in forward order, then the
// experts, in place or copied) and which data file each record goes to.

import { namesOf, trunkOrder } from '../checkpoint/names.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { PACK_ALIGN, type ExpertTemplateItem, type ExpertsMode, type PackedRecord, type RecordKind } from '../checkpoint/packed.js';
import { type TensorEntry } from '../checkpoint/safetensors.js';
import { UserError } from '../util/errors.js';
import { buildLayout } from './layout.js';

const LINEAR_SUFFIXES = ['.weight', '.weight_packed', '.weight_scale', '.weight_scale_inv', '.weight_shape'];

export const alignUp = (n: number, a = PACK_ALIGN) => Math.ceil(n / a) * a;

interface PlannedTensor {
  entry: TensorEntry;
  offsetInRecord: number;
}

export interface PlannedRecord {
  rec: PackedRecord;
  tensors: PlannedTensor[];
  /** Index of its data file in the manifest's `files`. */
  fileIndex: number;
  /** Data file series this record goes to. */
  series: 'trunk' | 'experts';
}

export interface ExpertGroup {
  prefix: string;
  tensors: TensorEntry[]; // gate, up, down x suffix order
}

/** Split one group of tensors into records of at most maxRecord bytes, at tensor boundaries. */
function splitGroup(name: string, kind: RecordKind, tensors: TensorEntry[], maxRecord: number, align: number): PlannedRecord[] {
  const parts: PlannedTensor[][] = [];
  let cur: PlannedTensor[] = [];
  let len = 0;
  for (const e of tensors) {
    const at = alignUp(len, align);
    if (cur.length > 0 && at + e.nbytes > maxRecord) {
      parts.push(cur);
      cur = [];
      len = 0;
    }
    const off = alignUp(len, align);
    cur.push({ entry: e, offsetInRecord: off });
    len = off + e.nbytes;
  }
  if (cur.length > 0) parts.push(cur);
  return parts.map((ts, i) => {
    const last = ts[ts.length - 1]!;
    return {
      rec: { name: parts.length > 1 ? `${name}.part${i}` : name, kind, file: '', offset: -1, length: last.offsetInRecord + last.entry.nbytes, sha256: '' },
      tensors: ts,
      fileIndex: -1,
      series: kind === 'expert' ? 'experts' : 'trunk',
    };
  });
}

function linearTensors(entries: Map<string, TensorEntry>, base: string): TensorEntry[] {
  return LINEAR_SUFFIXES.map((s) => entries.get(base + s)).filter((e): e is TensorEntry => e !== undefined);
}

function expertPrefix(cfg: ModelConfig, l: number, e: number): string {
  return namesOf(cfg).expertPrefix(l, e);
}

function sameTemplate(a: ExpertTemplateItem[], b: ExpertTemplateItem[]): boolean {
  return a.length === b.length && a.every((x, i) => {
    const y = b[i]!;
    return x.suffix === y.suffix && x.dtype === y.dtype && x.offset === y.offset && x.nbytes === y.nbytes && JSON.stringify(x.shape) === JSON.stringify(y.shape);
  });
}

export interface PackPlan {
  records: PlannedRecord[];
  expertGroups: ExpertGroup[];
  inPlace: boolean;
  template: ExpertTemplateItem[];
  inPlaceAt: Map<string, { file: string; offset: number }>;
  dropped: string[];
}

/** `layoutEntries`: the source's entries, for validation (`entries` may point coded tensors at their coded bytes). */
export function planPack(cfg: ModelConfig, entries: Map<string, TensorEntry>, maxRecord: number, mode: ExpertsMode, layoutEntries = entries): PackPlan {
  const layout = buildLayout(cfg, layoutEntries); // validates every tensor the engine uses
  const assigned = new Set<string>();
  const take = (es: TensorEntry[]) => {
    for (const e of es) assigned.add(e.name);
    return es;
  };
  const records = trunkRecords(cfg, entries, [...layout.smalls.values()], maxRecord, assigned, take);
  const expertGroups = groupExperts(cfg, entries, take);
  const placed = (mode !== 'pack' && expertGroups.length > 0 ? inPlaceExperts(expertGroups) : null) ?? { why: '' };
  if (mode === 'in-place' && !('template' in placed) && expertGroups.length > 0) throw new UserError(`pack: --experts in-place: ${placed.why}`);
  const inPlace = 'template' in placed;
  const template = inPlace ? placed.template : packedExperts(expertGroups, records);
  const inPlaceAt = inPlace ? placed.at : new Map<string, { file: string; offset: number }>();
  const dropped = [...entries.keys()].filter((n) => !assigned.has(n)).sort();
  return { records, expertGroups, inPlace, template, inPlaceAt, dropped };
}

const byOffset = (a: TensorEntry, b: TensorEntry) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.offset - b.offset);

/** The trunk's records: the embedding, each layer's matrices and small tensors, then the head (with any small tensor left). */
function trunkRecords(cfg: ModelConfig, entries: Map<string, TensorEntry>, smallEntries: TensorEntry[], maxRecord: number, assigned: Set<string>, take: (es: TensorEntry[]) => TensorEntry[]): PlannedRecord[] {
  const records: PlannedRecord[] = [];
  const names = namesOf(cfg);
  const embed = take(linearTensors(entries, names.embed));
  records.push(...splitGroup('embed', 'embed', embed, maxRecord, PACK_ALIGN));
  const order = trunkOrder(cfg);
  const smalls = smallEntries.sort(byOffset);
  for (let l = 0; l < cfg.numLayers; l++) {
    const ts: TensorEntry[] = [];
    for (const m of order) if (m.layer === l) ts.push(...take(linearTensors(entries, m.base)));
    const lp = names.layer(l);
    ts.push(...take(smalls.filter((e) => e.name.startsWith(lp) && !assigned.has(e.name))));
    records.push(...splitGroup(`layer.${l}`, 'layer', ts, maxRecord, PACK_ALIGN));
  }
  const head = take(linearTensors(entries, names.lmHead));
  head.push(...take(smalls.filter((e) => !assigned.has(e.name))));
  records.push(...splitGroup('head', 'head', head, maxRecord, PACK_ALIGN));
  return records;
}

/** Experts: one group per (layer, expert), tensors in gate, up, down order. */
function groupExperts(cfg: ModelConfig, entries: Map<string, TensorEntry>, take: (es: TensorEntry[]) => TensorEntry[]): ExpertGroup[] {
  const names = namesOf(cfg);
  const groups: ExpertGroup[] = [];
  cfg.layers.forEach((L, l) => {
    if (L.ffn !== 'moe') return;
    for (let e = 0; e < cfg.moe.experts; e++) {
      const ts = take(names.expert(l, e).flatMap((b) => linearTensors(entries, b)));
      if (ts.length > 0) groups.push({ prefix: expertPrefix(cfg, l, e), tensors: ts });
    }
  });
  return groups;
}

/** Experts left in place: each one contiguous run in one shard, with the same relative layout for all; else why not. */
function inPlaceExperts(groups: ExpertGroup[]): { template: ExpertTemplateItem[]; at: Map<string, { file: string; offset: number }> } | { why: string } {
  let template: ExpertTemplateItem[] = [];
  const at = new Map<string, { file: string; offset: number }>();
  for (const g of groups) {
    const s = [...g.tensors].sort(byOffset);
    const base = s[0]!.offset;
    if (!s.every((t, i) => t.file === s[0]!.file && (i === 0 || t.offset === s[i - 1]!.offset + s[i - 1]!.nbytes))) return { why: `expert ${g.prefix} is not one contiguous run in its shard` };
    const tpl = s.map((t) => ({ suffix: t.name.slice(g.prefix.length), dtype: t.dtype, shape: t.shape, offset: t.offset - base, nbytes: t.nbytes }));
    if (template.length > 0 && !sameTemplate(template, tpl)) return { why: `expert ${g.prefix} is laid out differently from ${groups[0]!.prefix}` };
    if (template.length === 0) template = tpl;
    at.set(g.prefix, { file: s[0]!.file, offset: base });
  }
  return { template, at };
}

/** Experts copied into the pack: one record each, its tensors back to back; returns their common template. */
function packedExperts(groups: ExpertGroup[], records: PlannedRecord[]): ExpertTemplateItem[] {
  let template: ExpertTemplateItem[] = [];
  for (const g of groups) {
    let off = 0;
    const tpl = g.tensors.map((t) => {
      const item = { suffix: t.name.slice(g.prefix.length), dtype: t.dtype, shape: t.shape, offset: off, nbytes: t.nbytes };
      off += t.nbytes;
      return item;
    });
    if (template.length === 0) template = tpl;
    else if (!sameTemplate(template, tpl)) throw new UserError(`pack: expert ${g.prefix} has other tensors than ${groups[0]!.prefix}`);
    const m = /layers\.(\d+)\..*experts\.(\d+)\.$/.exec(g.prefix);
    const name = m ? `expert.${m[1]}.${m[2]}` : `expert.${g.prefix}`;
    // Back to back inside the record (alignment 1): one read fetches the expert.
    records.push(...splitGroup(name, 'expert', g.tensors, Number.MAX_SAFE_INTEGER, 1));
  }
  return template;
}

/** Assign records to data files of one series, rolling over at fileSize. */
export function placeRecords(recs: PlannedRecord[], series: 'trunk' | 'experts', fileSize: number, files: { name: string; size: number }[]): void {
  let fi = -1;
  let pos = 0;
  let n = 0;
  for (const r of recs) {
    if (fi < 0 || (pos > 0 && pos + r.rec.length > fileSize)) {
      n++;
      files.push({ name: `${series}-${String(n).padStart(5, '0')}.bin`, size: 0 });
      fi = files.length - 1;
      pos = 0;
    }
    r.fileIndex = fi;
    r.rec.file = files[fi]!.name;
    r.rec.offset = pos;
    pos = alignUp(pos + r.rec.length);
    files[fi]!.size = pos; // files end 4 KiB-aligned
  }
}
