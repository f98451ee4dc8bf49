// What Ollama's clients ask about the model before they chat: /api/tags (the models), /api/ps (the
// loaded ones), /api/show (details, capabilities, parameters) and /api/version. One model is
// served, loaded for the server's life; its size and digest come from the checkpoint's tensor
// index (no file is read again), computed once.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { listedName } from './ollama-request.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;

/** The Ollama API level whose shapes these routes follow (thinking, tool_name, think levels):
 *  clients gate features on the version they read here. */
export const OLLAMA_API_VERSION = '0.12.0';

interface Facts {
  size: number;
  digest: string;
  modifiedAt: string;
  parameters: number;
  dtype: string;
}

const facts = new WeakMap<Served, Facts>();

function factsOf(s: Served): Facts {
  let f = facts.get(s);
  if (f) return f;
  const entries = [...s.kimi.model.store.entries.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  const hash = createHash('sha256');
  const byDtype = new Map<string, number>();
  let size = 0;
  let parameters = 0;
  let mtime = 0;
  const files = new Set<string>();
  for (const e of entries) {
    hash.update(`${e.name}\0${e.dtype}\0${e.shape.join(',')}\0${e.nbytes}\n`);
    size += e.coded?.storedBytes ?? e.nbytes;
    parameters += e.shape.reduce((a, b) => a * b, 1);
    byDtype.set(e.dtype, (byDtype.get(e.dtype) ?? 0) + e.nbytes);
    files.add(e.file);
  }
  for (const file of files) {
    try {
      mtime = Math.max(mtime, fs.statSync(file).mtimeMs);
    } catch {
      // a file the store opened by another path: its time is not needed
    }
  }
  const dtype = [...byDtype].sort((a, b) => b[1] - a[1])[0]?.[0] ?? 'unknown';
  f = { size, digest: hash.digest('hex'), modifiedAt: new Date(mtime || Date.now()).toISOString(), parameters, dtype };
  facts.set(s, f);
  return f;
}

/** 12.3M, 1.0B, 1.0T: as Ollama writes a parameter count. */
function parameterSize(n: number): string {
  for (const [unit, v] of [['T', 1e12], ['B', 1e9], ['M', 1e6], ['K', 1e3]] as const) if (n >= v) return `${(n / v).toFixed(1)}${unit}`;
  return String(n);
}

function details(s: Served): Body {
  const f = factsOf(s);
  const arch = s.kimi.architecture;
  return { parent_model: '', format: 'safetensors', family: arch, families: [arch], parameter_size: parameterSize(f.parameters), quantization_level: f.dtype };
}

function entry(s: Served): Body {
  const f = factsOf(s);
  const name = listedName(s);
  return { name, model: name, modified_at: f.modifiedAt, size: f.size, digest: f.digest, details: details(s) };
}

export const tags = (s: Served): Body => ({ models: [entry(s)] });

/** Loaded for good: it expires never (a far date, which Ollama's Go clients still parse). */
export const running = (s: Served): Body => ({ models: [{ ...entry(s), expires_at: '9999-12-31T23:59:59Z', size_vram: 0, context_length: s.maxContext }] });

/** What the model can do, as Ollama's clients test it (tools, thinking). */
function capabilities(s: Served): string[] {
  return s.kimi.format === 'k3' ? ['completion', 'tools', 'thinking'] : ['completion', 'tools'];
}

export function show(s: Served): Body {
  const f = factsOf(s);
  const cfg = s.kimi.model.config;
  const arch = s.kimi.architecture;
  const params = [`num_ctx ${s.maxContext}`];
  if (s.defaults?.temperature !== undefined) params.push(`temperature ${s.defaults.temperature}`);
  if (s.defaults?.top_p !== undefined) params.push(`top_p ${s.defaults.top_p}`);
  return {
    license: '',
    modelfile: `# served by kimi-k3-ts (k3 serve); there is no Modelfile\nFROM ${listedName(s)}\n`,
    parameters: params.join('\n'),
    template: '', // K3's chat format is rendered by the server, not by a Go template
    details: details(s),
    model_info: {
      'general.architecture': arch,
      'general.parameter_count': f.parameters,
      [`${arch}.context_length`]: cfg.maxPositions,
      [`${arch}.embedding_length`]: cfg.hiddenSize,
      [`${arch}.block_count`]: cfg.numLayers,
      [`${arch}.vocab_size`]: cfg.vocabSize,
    },
    capabilities: capabilities(s),
    modified_at: f.modifiedAt,
  };
}
