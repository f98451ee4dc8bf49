// Field readers for config.json: look a field up under its names (Moonshot's and DeepSeek's) in a
// list of objects (text_config, linear_attn_config, the top level) and check its type and range,
// so every bad field becomes one line naming the file and the field.

import * as fs from 'node:fs';
import { UserError } from '../util/errors.js';

export type Json = Record<string, unknown>;

export class Reader {
  constructor(
    private readonly file: string,
    private readonly objs: { obj: Json; path: string }[],
  ) {}
  private find(names: string[]): { value: unknown; where: string } | undefined {
    for (const { obj, path: p } of this.objs) {
      for (const n of names) {
        if (Object.prototype.hasOwnProperty.call(obj, n) && obj[n] !== undefined) return { value: obj[n], where: p + n };
      }
    }
    return undefined;
  }
  private missing(names: string[]): never {
    throw new UserError(`${this.file}: missing required field ${this.objs[0]!.path}${names[0]}${names.length > 1 ? ` (or ${names.slice(1).join(', ')})` : ''}`);
  }
  has(...names: string[]): boolean {
    const f = this.find(names);
    return f !== undefined && f.value !== null;
  }
  num(...names: string[]): number {
    const f = this.find(names);
    if (!f || f.value === null) this.missing(names);
    if (typeof f.value !== 'number' || !Number.isFinite(f.value)) throw new UserError(`${this.file}: field ${f.where} must be a number, got ${JSON.stringify(f.value)}`);
    return f.value;
  }
  int(...names: string[]): number {
    const v = this.num(...names);
    if (!Number.isInteger(v) || v < 0) throw new UserError(`${this.file}: field ${this.find(names)!.where} must be a non-negative integer, got ${v}`);
    return v;
  }
  pos(...names: string[]): number {
    const v = this.int(...names);
    if (v <= 0) throw new UserError(`${this.file}: field ${this.find(names)!.where} must be positive, got ${v}`);
    return v;
  }
  optNum(def: number | null, ...names: string[]): number | null {
    return this.has(...names) ? this.num(...names) : def;
  }
  optInt(def: number, ...names: string[]): number {
    return this.has(...names) ? this.int(...names) : def;
  }
  bool(def: boolean, ...names: string[]): boolean {
    const f = this.find(names);
    if (!f || f.value === null) return def;
    if (typeof f.value !== 'boolean') throw new UserError(`${this.file}: field ${f.where} must be true or false`);
    return f.value;
  }
  str(def: string | null, ...names: string[]): string | null {
    const f = this.find(names);
    if (!f || f.value === null) return def;
    if (typeof f.value !== 'string') throw new UserError(`${this.file}: field ${f.where} must be a string`);
    return f.value;
  }
  obj(...names: string[]): Json | null {
    const f = this.find(names);
    if (!f || f.value === null) return null;
    if (typeof f.value !== 'object' || Array.isArray(f.value)) throw new UserError(`${this.file}: field ${f.where} must be an object`);
    return f.value as Json;
  }
  intList(...names: string[]): number[] | null {
    const f = this.find(names);
    if (!f || f.value === null) return null;
    if (!Array.isArray(f.value) || !f.value.every((x) => Number.isInteger(x))) throw new UserError(`${this.file}: field ${f.where} must be a list of integers`);
    return f.value as number[];
  }
  strList(...names: string[]): string[] | null {
    const f = this.find(names);
    if (!f || f.value === null) return null;
    if (!Array.isArray(f.value) || !f.value.every((x) => typeof x === 'string')) throw new UserError(`${this.file}: field ${f.where} must be a list of strings`);
    return f.value as string[];
  }
  ids(...names: string[]): number[] {
    const f = this.find(names);
    if (!f || f.value === null) return [];
    if (typeof f.value === 'number') return [f.value];
    if (Array.isArray(f.value) && f.value.every((x) => Number.isInteger(x))) return f.value as number[];
    throw new UserError(`${this.file}: field ${f.where} must be an id or a list of ids`);
  }
  fail(msg: string): never {
    throw new UserError(`${this.file}: ${msg}`);
  }
  /** `v` (field `name`) must lie in [lo, hi]; `open` makes lo exclusive (a value that must be positive). */
  range(name: string, v: number, lo: number, hi: number, open = false): number {
    const aboveLo = open ? v > lo : v >= lo;
    if (!aboveLo || !(v <= hi)) this.fail(`field ${name} = ${v} is outside ${open ? '(' : '['}${lo}, ${hi}]`);
    return v;
  }
}

// Bounds that follow from the architectures (docs/spec/ARCHITECTURE.md §2.1, §3.1, §4.1) with wide
// margins; they exist so that a damaged or hand-edited config stops here, with a line naming the
// field, instead of allocating a billion layers or computing with a negative epsilon.
export const LIMITS = {
  layers: 1024,
  hidden: 1 << 17,
  vocab: 1 << 24,
  heads: 4096,
  headDim: 4096,
  rank: 1 << 17,
  intermediate: 1 << 20,
  experts: 1 << 14,
  convSize: 64,
  positions: 1 << 30,
  scaling: 1000,
} as const;

/** A config file read as one JSON object: a missing file exits 2, any other fault one line. */
export function readJsonObject(file: string): Json {
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${file}: cannot read (${code ?? String(e)})`, code === 'ENOENT' ? 2 : 1);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new UserError(`${file}: not valid JSON`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new UserError(`${file}: not a JSON object`);
  return json as Json;
}
