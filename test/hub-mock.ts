// A Hugging Face Hub on 127.0.0.1 for `k3 pull` tests, answering the API shapes the real Hub does:
// GET /api/models/{repo}/revision/{rev} (the commit sha), GET /api/models/{repo}/tree/{rev}?
// recursive=true (paged with a Link header; LFS files with lfs.oid = sha256), GET /{repo}/resolve/
// {rev}/{path} (small files served there; LFS files redirected to a CDN on another host,
// 127.0.0.2, as the Hub redirects to cdn-lfs.hf.co). Both honour Range. Faults on demand: a
// connection destroyed mid-body, 5xx answers, corrupted bytes; a throttle; counters of bytes served
// per file and of Authorization headers seen by each host.

import * as http from 'node:http';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';

export interface MockRepo {
  commit: string;
  branches: Record<string, string>;
  files: Map<string, Buffer>;
  /** Only with `Authorization: Bearer <token>`. */
  token?: string;
}

export interface MockHub {
  url: string;
  cdn: string;
  /** Bytes written per file path (hub and CDN). */
  served: Map<string, number>;
  /** Download requests per file path. */
  gets: Map<string, number>;
  apiCalls: number;
  authSeen: { hub: number; cdn: number };
  /** The next N downloads of a path: destroy the socket after half the body. */
  drop: Map<string, number>;
  /** The next N downloads of a path: 503. */
  fail: Map<string, number>;
  /** The next N downloads of a path: one byte flipped. */
  corrupt: Map<string, number>;
  /** Bytes per second per connection for LFS bodies (0: as fast as possible). */
  throttle: number;
  /** Tree entries per page. */
  pageSize: number;
  reset(): void;
  close(): Promise<void>;
}

const LFS = /\.(safetensors|png|bin)$/;

function gitOid(b: Buffer): string {
  return createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

function take(m: Map<string, number>, key: string): boolean {
  const n = m.get(key) ?? 0;
  if (n <= 0) return false;
  m.set(key, n - 1);
  return true;
}

export async function startMockHub(repos: Record<string, MockRepo>): Promise<MockHub> {
  const hub: MockHub = {
    url: '', cdn: '', served: new Map(), gets: new Map(), apiCalls: 0, authSeen: { hub: 0, cdn: 0 },
    drop: new Map(), fail: new Map(), corrupt: new Map(), throttle: 0, pageSize: 3,
    reset() {
      this.served.clear();
      this.gets.clear();
      this.apiCalls = 0;
      this.authSeen = { hub: 0, cdn: 0 };
      this.drop.clear();
      this.fail.clear();
      this.corrupt.clear();
      this.throttle = 0;
    },
    close: async () => {},
  };

  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };

  /** The body of `file` (or the requested range), with the faults and throttle asked for. */
  const send = (req: http.IncomingMessage, res: http.ServerResponse, name: string, data: Buffer, slow: boolean) => {
    hub.gets.set(name, (hub.gets.get(name) ?? 0) + 1);
    if (take(hub.fail, name)) return json(res, 503, { error: 'Service Unavailable' });
    let body = data;
    if (take(hub.corrupt, name)) {
      body = Buffer.from(data);
      body[body.length >> 1] ^= 0xff;
    }
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    let start = 0;
    if (range) {
      start = Number(range[1]);
      if (start >= data.length) {
        res.writeHead(416, { 'content-range': `bytes */${data.length}` });
        return res.end();
      }
      res.writeHead(206, { 'content-length': String(data.length - start), 'content-range': `bytes ${start}-${data.length - 1}/${data.length}`, 'accept-ranges': 'bytes' });
    } else res.writeHead(200, { 'content-length': String(data.length), 'accept-ranges': 'bytes' });
    const dropAt = take(hub.drop, name) ? start + ((data.length - start) >> 1) : Infinity;
    const piece = 16 << 10;
    let pos = start;
    const pump = () => {
      if (res.destroyed) return;
      if (pos >= data.length) return void res.end();
      const end = Math.min(data.length, pos + piece, dropAt);
      hub.served.set(name, (hub.served.get(name) ?? 0) + (end - pos));
      res.write(body.subarray(pos, end));
      pos = end;
      if (pos >= dropAt) return void setTimeout(() => res.socket?.destroy(), 5);
      if (slow && hub.throttle > 0) setTimeout(pump, (1000 * piece) / hub.throttle);
      else setImmediate(pump);
    };
    pump();
  };

  const findRepo = (owner: string, name: string): [string, MockRepo] | null => {
    const id = `${owner}/${name}`;
    return repos[id] ? [id, repos[id]] : null;
  };
  const authorized = (req: http.IncomingMessage, r: MockRepo) => !r.token || req.headers.authorization === `Bearer ${r.token}`;

  const hubServer = http.createServer((req, res) => {
    if (req.headers.authorization) hub.authSeen.hub++;
    const u = new URL(req.url ?? '/', 'http://x');
    const parts = u.pathname.split('/').filter((p) => p.length > 0).map(decodeURIComponent);
    if (parts[0] === 'api' && parts[1] === 'models') {
      hub.apiCalls++;
      const found = findRepo(parts[2]!, parts[3]!);
      if (!found) return json(res, 401, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
      const [id, r] = found;
      if (!authorized(req, r)) return json(res, 401, { error: 'Invalid credentials' }, { 'x-error-code': 'GatedRepo' });
      const rev = parts[5] ?? '';
      const sha = rev === r.commit ? r.commit : r.branches[rev];
      if (!sha) return json(res, 404, { error: `Invalid rev id: ${rev}` }, { 'x-error-code': 'RevisionNotFound' });
      const names = [...r.files.keys()].sort();
      if (parts[4] === 'revision') return json(res, 200, { _id: 'x', id, sha, private: !!r.token, siblings: names.map((rfilename) => ({ rfilename })) });
      if (parts[4] === 'tree') {
        const entries: unknown[] = [];
        const dirs = new Set<string>();
        for (const n of names) {
          const d = n.includes('/') ? n.slice(0, n.lastIndexOf('/')) : '';
          if (d && !dirs.has(d)) {
            dirs.add(d);
            entries.push({ type: 'directory', oid: gitOid(Buffer.from(d)), size: 0, path: d });
          }
          const b = r.files.get(n)!;
          entries.push({ type: 'file', oid: gitOid(LFS.test(n) ? Buffer.from(`lfs pointer ${sha256(b)}`) : b), size: b.length, path: n, ...(LFS.test(n) ? { lfs: { oid: sha256(b), size: b.length, pointerSize: 134 } } : {}) });
        }
        const cursor = Number(u.searchParams.get('cursor') ?? 0);
        const page = entries.slice(cursor, cursor + hub.pageSize);
        const headers: Record<string, string> = {};
        if (cursor + hub.pageSize < entries.length) {
          const next = new URL(u.pathname, hub.url);
          next.searchParams.set('recursive', 'true');
          next.searchParams.set('cursor', String(cursor + hub.pageSize));
          headers.link = `<${next.href}>; rel="next"`;
        }
        return json(res, 200, page, headers);
      }
      return json(res, 404, { error: 'not found' });
    }
    if (parts[2] === 'resolve') {
      const found = findRepo(parts[0]!, parts[1]!);
      if (!found) return json(res, 401, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
      const [, r] = found;
      if (!authorized(req, r)) return json(res, 401, { error: 'Invalid credentials' }, { 'x-error-code': 'GatedRepo' });
      const sha = parts[3] === r.commit ? r.commit : r.branches[parts[3]!];
      if (!sha) return json(res, 404, { error: 'Invalid rev' }, { 'x-error-code': 'RevisionNotFound' });
      const name = parts.slice(4).join('/');
      const data = r.files.get(name);
      if (!data) return json(res, 404, { error: 'Entry not found' }, { 'x-error-code': 'EntryNotFound' });
      if (LFS.test(name)) {
        res.writeHead(302, { location: `${hub.cdn}/repos/${sha256(data)}?path=${encodeURIComponent(name)}&sig=x`, 'x-repo-commit': sha, 'x-linked-etag': `"${sha256(data)}"`, 'x-linked-size': String(data.length) });
        return res.end();
      }
      res.setHeader('x-repo-commit', sha);
      res.setHeader('etag', `"${gitOid(data)}"`);
      return send(req, res, name, data, false);
    }
    json(res, 404, { error: 'not found' });
  });

  const cdnServer = http.createServer((req, res) => {
    if (req.headers.authorization) hub.authSeen.cdn++;
    const u = new URL(req.url ?? '/', 'http://x');
    const name = u.searchParams.get('path') ?? '';
    const want = u.pathname.split('/')[2];
    for (const r of Object.values(repos)) {
      const data = r.files.get(name);
      if (data && sha256(data) === want) return send(req, res, name, data, true);
    }
    res.writeHead(403);
    res.end('AccessDenied');
  });

  const listen = (s: http.Server, host: string) => new Promise<number>((resolve) => s.listen(0, host, () => resolve((s.address() as AddressInfo).port)));
  hub.url = `http://127.0.0.1:${await listen(hubServer, '127.0.0.1')}`;
  hub.cdn = `http://127.0.0.2:${await listen(cdnServer, '127.0.0.2')}`;
  hub.close = async () => {
    for (const s of [hubServer, cdnServer]) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  };
  return hub;
}
