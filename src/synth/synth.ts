// `synthCheckpoint`: a complete random checkpoint directory (config.json, shards, index when
// sharded, synth.json, extra files) in the official layout of K3, Kimi Linear or K2.
//
// The directory appears only when complete: everything is written into `<out>.tmp-<pid>` and
// renamed at the end. `<out>/synth.json` records the resolved options; rerunning with the same
// options finds it and does nothing; other options need `force` (which replaces only a directory
// that looks like a checkpoint).

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import { buildConfig } from './configs.js';
import { resolveSynth, type ResolvedSynth, type SynthOptions } from './dims.js';
import { makeFill } from './gen.js';
import { planCheckpoint, type CheckpointPlan } from './plan.js';
import { indexJson, safetensorsLayout, writeFileAtomic, writeSafetensors } from './writer.js';
import { removeStaleTmp, tmpPath } from '../util/stale-tmp.js';

export type { SynthOptions, SynthDims, SynthArch, SynthPreset, ExpertsFormat, ResolvedSynth } from './dims.js';
export { resolveSynth, presetDims, defaultMlaLayers } from './dims.js';
export { planCheckpoint } from './plan.js';
export { buildConfig } from './configs.js';

/** Bump when the bytes written for the same options change. */
export const SYNTH_FORMAT_VERSION = 2;

export interface SynthResult {
  dir: string;
  /** True when `dir` already held this exact checkpoint and nothing was written. */
  skipped: boolean;
  resolved: ResolvedSynth;
  /** Shard file names in order. */
  shards: string[];
  tensors: number;
  /** Bytes of all shard files (headers included). */
  bytes: number;
  seconds: number;
}

/** The contents of synth.json: the options that determine the bytes. */
export function synthRecord(resolved: ResolvedSynth, extraFiles?: Record<string, string | Uint8Array>): Record<string, unknown> {
  let extra: string | null = null;
  if (extraFiles && Object.keys(extraFiles).length > 0) {
    const h = createHash('sha256');
    for (const name of Object.keys(extraFiles).sort()) {
      const v = extraFiles[name]!;
      h.update(`${name}\0${typeof v === 'string' ? 's' : 'b'}${Buffer.byteLength(v)}\0`);
      h.update(v);
    }
    extra = h.digest('hex');
  }
  return { generator: 'kimi-k3-ts synth', version: SYNTH_FORMAT_VERSION, ...resolved, extraFiles: extra };
}

function sameRecord(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canonical).join(',')}]`;
  if (x && typeof x === 'object') {
    return `{${Object.keys(x as object).sort().map((k) => `${JSON.stringify(k)}:${canonical((x as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(x);
}

function readRecord(dir: string): unknown {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'synth.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** A directory `force` may replace: empty, or holding a config.json / synth.json. */
function replaceable(dir: string): boolean {
  const names = fs.readdirSync(dir);
  return names.length === 0 || names.includes('config.json') || names.includes('synth.json');
}

function checkExtraName(name: string): void {
  const reserved = name === 'config.json' || name === 'synth.json' || name === 'model.safetensors.index.json' || name.endsWith('.safetensors');
  if (!name || name === '.' || name === '..' || name.includes('/') || name.includes('\\') || name.includes('\0') || reserved) {
    throw new UserError(`synth: extra file name ${JSON.stringify(name)} is not a plain file name, or is one synth writes itself`);
  }
}

/** Total bytes of the shard files a plan writes. */
export function planFileBytes(plan: CheckpointPlan): number {
  return plan.shards.reduce((s, sh) => s + safetensorsLayout(sh.tensors).fileBytes, 0);
}

export async function synthCheckpoint(opts: SynthOptions): Promise<SynthResult> {
  const t0 = performance.now();
  if (!opts.out) throw new UserError('synth: --out DIR is required');
  const resolved = resolveSynth(opts);
  const extra = opts.extraFiles ?? {};
  for (const name of Object.keys(extra)) checkExtraName(name);
  const record = synthRecord(resolved, opts.extraFiles);
  const out = path.resolve(opts.out);
  const plan = planCheckpoint(resolved);
  const fileBytes = planFileBytes(plan);
  const result = (skipped: boolean): SynthResult => ({ dir: out, skipped, resolved, shards: plan.shards.map((s) => s.file), tensors: plan.tensorCount, bytes: fileBytes, seconds: (performance.now() - t0) / 1000 });

  let existing = false;
  if (fs.existsSync(out)) {
    if (!fs.statSync(out).isDirectory()) throw new UserError(`synth: ${out} exists and is not a directory`);
    if (sameRecord(readRecord(out), record)) return result(true);
    if (!opts.force) throw new UserError(`synth: ${out} already exists and was not written by synth with these options (--force replaces it)`);
    if (!replaceable(out)) throw new UserError(`synth: ${out} is not empty and does not look like a checkpoint directory; refusing to replace it even with --force`);
    existing = true;
  }

  await fsp.mkdir(path.dirname(out), { recursive: true });
  removeStaleTmp(out);
  const tmp = tmpPath(out);
  await fsp.rm(tmp, { recursive: true, force: true });
  await fsp.mkdir(tmp);
  let ok = false;
  try {
    await writeShards(tmp, plan, resolved.seed, fileBytes, opts);
    await writeSidecars(tmp, plan, resolved, record, extra);
    const skipped = await publish(tmp, out, existing, record);
    ok = true;
    return result(skipped);
  } finally {
    if (!ok) await fsp.rm(tmp, { recursive: true, force: true }).catch(() => {});
  }
}

/** The shard files, each tensor filled from its generator, reporting progress at most every 250 ms. */
async function writeShards(tmp: string, plan: CheckpointPlan, seed: number, fileBytes: number, opts: SynthOptions): Promise<void> {
  let done = 0;
  let lastReport = 0;
  for (const shard of plan.shards) {
    const tensors = shard.tensors.map((tp) => ({ name: tp.name, dtype: tp.dtype, shape: tp.shape, fill: makeFill(tp, seed) }));
    const before = done;
    await writeSafetensors(path.join(tmp, shard.file), tensors, {
      signal: opts.signal,
      onBytes: (n) => {
        done = before + n;
        const now = performance.now();
        if (opts.onProgress && now - lastReport > 250) {
          lastReport = now;
          opts.onProgress(done, fileBytes);
        }
      },
    });
  }
  opts.onProgress?.(fileBytes, fileBytes);
}

/** Everything beside the shards: the index when sharded, config.json, the extra files, synth.json last. */
async function writeSidecars(tmp: string, plan: CheckpointPlan, resolved: ResolvedSynth, record: Record<string, unknown>, extra: Record<string, string | Uint8Array>): Promise<void> {
  if (plan.shards.length > 1) {
    const wm: Record<string, string> = {};
    for (const s of plan.shards) for (const tp of s.tensors) wm[tp.name] = s.file;
    await writeFileAtomic(path.join(tmp, 'model.safetensors.index.json'), indexJson(plan.totalSize, wm));
  }
  await writeFileAtomic(path.join(tmp, 'config.json'), JSON.stringify(buildConfig(resolved), null, 2) + '\n');
  for (const [name, data] of Object.entries(extra)) await writeFileAtomic(path.join(tmp, name), data);
  await writeFileAtomic(path.join(tmp, 'synth.json'), JSON.stringify(record, null, 2) + '\n');
}

/**
 * Renames the finished `tmp` to `out` (replacing an `existing` one); true when another process
 * finished the same checkpoint first, whose copy is kept (it is as good as ours).
 */
async function publish(tmp: string, out: string, existing: boolean, record: Record<string, unknown>): Promise<boolean> {
  if (existing) {
    const old = `${out}.old-${process.pid}`;
    await fsp.rename(out, old);
    await fsp.rename(tmp, out);
    await fsp.rm(old, { recursive: true, force: true });
    return false;
  }
  try {
    await fsp.rename(tmp, out);
    return false;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if ((code === 'ENOTEMPTY' || code === 'EEXIST') && sameRecord(readRecord(out), record)) {
      await fsp.rm(tmp, { recursive: true, force: true });
      return true;
    }
    throw e;
  }
}
