// Which files of a repository a text engine needs. By default everything but: shards the
// safetensors index maps only vision-tower / projector tensors to, safetensors files the index
// does not list, other weight formats next to safetensors, images and media, .gitattributes.
// `--include` globs pull a file whatever the default says; `--exclude` globs leave it out.

import { visionOnlyShards } from '../../checkpoint/multimodal.js';
import type { HubFile } from './listing.js';

export const INDEX_FILE = 'model.safetensors.index.json';

export interface Skipped {
  path: string;
  size: number;
  reason: string;
}

const MEDIA = /\.(png|jpe?g|gif|webp|svg|bmp|ico|tiff?|mp4|mov|webm|mp3|wav|pdf)$/i;
const OTHER_WEIGHTS = /\.(bin|pt|pth|ckpt|h5|msgpack|onnx|gguf|ot|npz)$/i;

/** fnmatch-style globs, as huggingface-cli's --include: `*` is any run of characters (`/` too),
 *  `?` one character, `[...]` a class; the whole path must match. */
export function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') re += '.*';
    else if (c === '?') re += '.';
    else if (c === '[') {
      const end = glob.indexOf(']', i + 2);
      if (end < 0) {
        re += '\\[';
        continue;
      }
      const body = glob.slice(i + 1, end).replace(/\\/g, '\\\\');
      re += `[${body.startsWith('!') ? `^${body.slice(1)}` : body}]`;
      i = end;
    } else re += c.replace(/[.+^${}()|\\\]]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

function defaultReason(f: HubFile, index: Record<string, string> | null, vision: Set<string>, hasSafetensors: boolean): string | null {
  if (vision.has(f.path)) return 'vision tower / projector only';
  if (index && f.path.endsWith('.safetensors') && !f.path.includes('/') && !Object.values(index).includes(f.path)) return `not in ${INDEX_FILE}`;
  if (MEDIA.test(f.path)) return 'image or media';
  if (hasSafetensors && OTHER_WEIGHTS.test(f.path)) return 'weights in a format the engine does not read';
  if (f.path === '.gitattributes') return 'git metadata';
  return null;
}

/** Split the listing into the files to pull and those skipped (with why). `weightMap` is the
 *  index's, or null when the repository has none. */
export function selectFiles(files: HubFile[], weightMap: Record<string, string> | null, include: string[] = [], exclude: string[] = []): { keep: HubFile[]; skipped: Skipped[] } {
  const inc = include.map(globToRegExp);
  const exc = exclude.map(globToRegExp);
  const vision = weightMap ? visionOnlyShards(weightMap) : new Set<string>();
  const hasSafetensors = files.some((f) => f.path.endsWith('.safetensors'));
  const keep: HubFile[] = [];
  const skipped: Skipped[] = [];
  for (const f of files) {
    const reason = inc.some((r) => r.test(f.path)) ? null : exc.some((r) => r.test(f.path)) ? 'matches --exclude' : defaultReason(f, weightMap, vision, hasSafetensors);
    if (reason === null) keep.push(f);
    else skipped.push({ path: f.path, size: f.size, reason });
  }
  return { keep, skipped };
}
