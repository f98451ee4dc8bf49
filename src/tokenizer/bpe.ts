// Byte-level BPE by lowest rank (tiktoken's rule, docs/spec/ARCHITECTURE.md §6.3 step 3).
//
// Own code, not a library: the npm `tiktoken` WebAssembly build does take Kimi's pattern and
// custom ranks (it produced the goldens), but this project's dependency budget allows only
// `@huggingface/jinja`, `js-tiktoken` would need the pattern rewritten anyway (exactly what
// pretokenize.ts does), and the core is small. Every golden case pins it.
//
// A piece is a "byte string": a JS string with one char (0..255) per UTF-8 byte, so that the
// rank table can be a Map<string, number> and a pair lookup is a slice.
//
// Rule: if the whole piece is a vocabulary entry, emit it. Otherwise start from single bytes and
// repeatedly merge the adjacent pair whose concatenation has the lowest rank, the leftmost on
// ties, until no adjacent pair is in the vocabulary. Short pieces use tiktoken's simple scan
// (O(n^2), fastest for the usual few bytes); long ones (25,000-char runs) use a binary heap over
// a linked list of parts, O(n log n), with the same (rank, position) order.

export type Ranks = ReadonlyMap<string, number>;

const SMALL = 48;

export function bpe(piece: string, ranks: Ranks, out: number[]): void {
  const whole = ranks.get(piece);
  if (whole !== undefined) {
    out.push(whole);
    return;
  }
  if (piece.length === 1) throw new Error(`BPE: byte 0x${piece.charCodeAt(0).toString(16)} has no rank`);
  if (piece.length <= SMALL) bpeSimple(piece, ranks, out);
  else bpeHeap(piece, ranks, out);
}

/** tiktoken's `byte_pair_merge`: a parts array of start offsets, rescanned for the minimum. */
export function bpeSimple(piece: string, ranks: Ranks, out: number[]): void {
  const n = piece.length;
  // starts[i] = offset of part i; part i spans starts[i]..starts[i+1].
  const starts: number[] = new Array(n + 1);
  for (let i = 0; i <= n; i++) starts[i] = i;
  // pr[i] = rank of part i joined with part i+1 (Infinity if none).
  const pr: number[] = new Array(n);
  for (let i = 0; i < n - 1; i++) pr[i] = ranks.get(piece.slice(i, i + 2)) ?? Infinity;
  pr[n - 1] = Infinity;
  let parts = n;
  const rankOf = (i: number): number =>
    i + 2 <= parts ? (ranks.get(piece.slice(starts[i]!, starts[i + 2]!)) ?? Infinity) : Infinity;
  for (;;) {
    let best = Infinity;
    let at = -1;
    for (let i = 0; i < parts - 1; i++) {
      if (pr[i]! < best) {
        best = pr[i]!;
        at = i;
      }
    }
    if (at < 0) break;
    // Merge part at+1 into part at.
    starts.splice(at + 1, 1);
    pr.splice(at + 1, 1);
    parts--;
    pr[at] = rankOf(at);
    if (at > 0) pr[at - 1] = rankOf(at - 1);
  }
  for (let i = 0; i < parts; i++) out.push(rankOrThrow(piece.slice(starts[i]!, starts[i + 1]!), ranks));
}

/** Same result as bpeSimple in O(n log n): parts are a doubly linked list keyed by their start
 *  offset; the heap holds (rank, start) of candidate pairs, checked for staleness when popped. */
export function bpeHeap(piece: string, ranks: Ranks, out: number[]): void {
  const n = piece.length;
  const next = new Int32Array(n); // start of the following part, n at the end
  const prev = new Int32Array(n); // start of the preceding part, -1 at the start
  const alive = new Uint8Array(n).fill(1);
  const pairRank = new Float64Array(n); // current rank of (part at i) + (next part)
  for (let i = 0; i < n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  const heap = new MinHeap(n);
  const setPair = (i: number): void => {
    const j = next[i]!;
    if (j >= n) {
      pairRank[i] = Infinity;
      return;
    }
    const r = ranks.get(piece.slice(i, next[j]!));
    pairRank[i] = r ?? Infinity;
    if (r !== undefined) heap.push(r, i);
  };
  for (let i = 0; i < n - 1; i++) setPair(i);
  pairRank[n - 1] = Infinity;
  while (heap.size > 0) {
    const r = heap.topRank();
    const i = heap.topPos();
    heap.pop();
    if (!alive[i] || pairRank[i] !== r) continue; // stale
    // Merge the part after i into i.
    const j = next[i]!;
    alive[j] = 0;
    next[i] = next[j]!;
    if (next[i]! < n) prev[next[i]!] = i;
    setPair(i);
    if (prev[i]! >= 0) setPair(prev[i]!);
  }
  for (let i = 0; i < n; i = next[i]!) out.push(rankOrThrow(piece.slice(i, next[i]!), ranks));
}

function rankOrThrow(bytes: string, ranks: Ranks): number {
  const r = ranks.get(bytes);
  if (r === undefined) throw new Error(`BPE: byte 0x${bytes.charCodeAt(0).toString(16)} has no rank (tiktoken.model lacks a single-byte token)`);
  return r;
}

/** Binary min-heap of (rank, pos), ordered by rank then pos (leftmost first on ties). */
class MinHeap {
  private rank: Float64Array;
  private pos: Int32Array;
  size = 0;
  constructor(capacity: number) {
    this.rank = new Float64Array(Math.max(16, capacity));
    this.pos = new Int32Array(Math.max(16, capacity));
  }
  topRank(): number {
    return this.rank[0]!;
  }
  topPos(): number {
    return this.pos[0]!;
  }
  private less(a: number, b: number): boolean {
    const ra = this.rank[a]!;
    const rb = this.rank[b]!;
    return ra < rb || (ra === rb && this.pos[a]! < this.pos[b]!);
  }
  private swap(a: number, b: number): void {
    const r = this.rank[a]!;
    this.rank[a] = this.rank[b]!;
    this.rank[b] = r;
    const p = this.pos[a]!;
    this.pos[a] = this.pos[b]!;
    this.pos[b] = p;
  }
  push(r: number, p: number): void {
    if (this.size === this.rank.length) {
      const nr = new Float64Array(this.size * 2);
      nr.set(this.rank);
      this.rank = nr;
      const np = new Int32Array(this.size * 2);
      np.set(this.pos);
      this.pos = np;
    }
    let i = this.size++;
    this.rank[i] = r;
    this.pos[i] = p;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(i, parent)) break;
      this.swap(i, parent);
      i = parent;
    }
  }
  pop(): void {
    const last = --this.size;
    if (last === 0) return;
    this.rank[0] = this.rank[last]!;
    this.pos[0] = this.pos[last]!;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < last && this.less(l, m)) m = l;
      if (r < last && this.less(r, m)) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
  }
}
