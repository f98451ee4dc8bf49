// `k3 pull REPO[@REVISION] [DIR]`: a model from the Hugging Face Hub, pinned, checked, resumable
// (src/api/hub/ does the work); `--pack` runs `k3 pack` on it after.

import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { parseRepoSpec } from '../api/hub/env.js';
import { pull, type PullProgress } from '../api/hub/pull.js';
import { RECORD_NAME, WORK_DIR } from '../api/hub/record.js';
import { packCheckpoint } from '../api/checkpoint-tools.js';
import { Interrupted, UserError } from '../util/errors.js';
import { formatBytes, formatEta } from '../util/format.js';
import { progressBar, progressLine } from '../util/progress.js';

const HELP = `usage: k3 pull REPO[@REVISION] [DIR] [--include GLOB]... [--exclude GLOB]... [--jobs N] [--pack] [--json]

Downloads a model repository from the Hugging Face Hub into DIR (default: the repository's name),
ready for every command that takes MODEL. REVISION (a branch, tag or commit; default main) is
pinned to its commit sha, recorded with the file list in DIR/${RECORD_NAME}.

By default only what text inference needs: shards that the safetensors index maps only vision
tower / projector tensors to, safetensors files the index does not list, other weight formats,
images and .gitattributes are skipped (DIR/${RECORD_NAME} lists them and why). The free space
is checked first. Files are fetched --jobs at a time into DIR/${WORK_DIR}/*.part (a killed or
dropped download resumes with an HTTP Range), checked against the sha256 the Hub lists (the git
blob id for small files), and only then moved to their names; a file whose bytes do not match is
fetched once more, then refused. Dropped connections, 5xx and 429 answers are retried with
backoff. Files already in the Hugging Face cache are reused (hard-linked when on the same disk).
Files already at their names in DIR are checked and kept when they match. Rerunning finishes
an interrupted pull (Ctrl-C keeps the parts); on a complete one it fetches nothing. A Hub that
cannot be reached falls back to the Hub cache, as with HF_HUB_OFFLINE.

environment:
  HF_ENDPOINT           the Hub (default https://huggingface.co)
  HF_TOKEN              for gated and private repositories; sent only to HF_ENDPOINT's host
  HF_HUB_OFFLINE=1      no network: only the Hub cache and what DIR holds
  HF_HUB_CACHE, HF_HOME where the Hub cache is (default ~/.cache/huggingface/hub)

options:
  --include GLOB        pull the files matching GLOB whatever the default says (repeatable;
                        * matches any characters, / too: --include '*.png')
  --exclude GLOB        leave out the files matching GLOB (repeatable; --include wins)
  --jobs N              files fetched at once (default 8)
  --retries N           consecutive failed tries of one file before giving up (default 10)
  --pack                run k3 pack DIR DIR-packed after (or --pack-dir OUT)
  --pack-dir OUT        where --pack writes
  --json                print a JSON summary (and no progress line)`;

/** `pull [####....]  45%  1.20 GiB / 2.60 GiB  110.0 MiB/s  ETA 12s  3/7 files`, the rate over the last 10 s. */
function progressRender(): (p: PullProgress, seconds: number) => string {
  const samples: { t: number; fetched: number }[] = [];
  return (p, s) => {
    samples.push({ t: s, fetched: p.fetched });
    while (samples.length > 2 && s - samples[0]!.t > 10) samples.shift();
    const first = samples[0]!;
    const rate = s > first.t ? (p.fetched - first.fetched) / (s - first.t) : 0;
    const frac = p.total > 0 ? p.done / p.total : 1;
    const fill = Math.round(frac * 24);
    return `pull [${'#'.repeat(fill)}${'.'.repeat(24 - fill)}] ${(100 * frac).toFixed(0).padStart(3)}%  ${formatBytes(p.done)} / ${formatBytes(p.total)}  ${formatBytes(rate)}/s  ETA ${formatEta(rate > 0 ? (p.total - p.done) / rate : Infinity)}  ${p.filesDone}/${p.files} files`;
  };
}

export const command: Command = {
  summary: 'download a model from the Hugging Face Hub: pinned, checked, resumable; the text model only',
  help: HELP,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse('pull', args, {
      include: { type: 'string', multiple: true },
      exclude: { type: 'string', multiple: true },
      jobs: { type: 'string' },
      retries: { type: 'string' },
      pack: { type: 'boolean' },
      'pack-dir': { type: 'string' },
      json: { type: 'boolean' },
    }, 1);
    if (positionals.length > 2) throw new UserError(`pull: unexpected argument ${JSON.stringify(positionals[2])} (k3 pull --help)`);
    const { repo, revision } = parseRepoSpec(positionals[0]!);
    const dir = path.resolve(positionals[1] ?? repo.split('/')[1]!);
    const jobs = parseIntFlag('pull', 'jobs', values.jobs, 8, 1);
    const retries = parseIntFlag('pull', 'retries', values.retries, 10, 0);

    const json = values.json === true;
    const tty = process.stderr.isTTY === true && !json;
    const render = progressRender();
    let last: PullProgress | null = null;
    // On a terminal only (progressLine is silent on a pipe), and never with --json.
    const line = json ? null : progressLine((_d, _t, s) => render(last!, s));
    const ac = new AbortController();
    const onSignal = (sig: NodeJS.Signals) => {
      if (ac.signal.aborted) process.exit(130);
      ac.abort(new Interrupted(`pull interrupted (${sig}); what was fetched is kept in ${path.join(dir, WORK_DIR)}: rerun to resume`));
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);

    const r = await pull({
      repo, revision, dir, jobs,
      include: values.include ?? [],
      exclude: values.exclude ?? [],
      policy: { retries },
      signal: ac.signal,
      onProgress: (p) => {
        last = p;
        line?.update(p.done, p.total);
      },
      onNote: (msg) => process.stderr.write(`${tty ? '\r\x1b[K' : ''}pull: ${msg}\n`),
    });
    line?.end();

    let packed: { out: string; skipped: boolean } | null = null;
    if (values.pack || values['pack-dir'] !== undefined) {
      const out = path.resolve(values['pack-dir'] ?? `${dir}-packed`);
      const bar = json ? null : progressBar('pack');
      const p = await packCheckpoint({ model: dir, out, onProgress: bar?.update, signal: ac.signal });
      bar?.end();
      packed = { out: p.out, skipped: p.skipped };
    }
    if (json) {
      console.log(JSON.stringify({
        repo: r.repo, revision: r.revision, commit: r.commit, dir: r.dir, offline: r.offline, files: r.files.length, bytes: r.bytes, fetched_bytes: r.fetched,
        from_cache: r.fromCache, already_present: r.present.length, refetched: r.refetched, retries: r.retries, skipped: r.skipped, seconds: r.seconds,
        ...(packed ? { packed: packed.out } : {}),
      }));
      return 0;
    }
    const why = new Map<string, { n: number; bytes: number }>();
    for (const s of r.skipped) {
      const w = why.get(s.reason) ?? { n: 0, bytes: 0 };
      w.n++;
      w.bytes += s.size;
      why.set(s.reason, w);
    }
    const skipped = [...why].map(([reason, w]) => `${w.n} ${reason} (${formatBytes(w.bytes)})`).join(', ');
    const extra = [r.fromCache.length ? `${r.fromCache.length} from the Hub cache` : '', r.present.length ? `${r.present.length} already in place` : '', r.refetched.length ? `${r.refetched.length} fetched again after a checksum mismatch` : '']
      .filter((x) => x).join(', ');
    console.log(
      `pull: ${r.repo}@${r.revision}${r.revision === r.commit ? '' : ` (${r.commit.slice(0, 12)})`} in ${r.dir}: ${r.files.length} files, ${formatBytes(r.bytes)}; ${formatBytes(r.fetched)} fetched in ${r.seconds.toFixed(1)} s${extra ? `; ${extra}` : ''}${skipped ? `; skipped ${skipped}` : ''}`,
    );
    if (packed) console.log(packed.skipped ? `pack: ${packed.out} already holds this pack; nothing to do` : `pack: wrote ${packed.out}`);
    return 0;
  },
};
