// A block's op calls, recorded in order and run together (docs/DESIGN.md, "the graph"). A block
// is written once against this: it never asks where its bytes live. The graph decides, per call,
// whether the op joins the chained dispatch of its home kernel memory (the one holding the
// block's state: weights resident there, arrays there or copied in) or runs on the host (a
// streamed or elsewhere-resident weight, state outside kernel memory, a JavaScript step: the
// kernels of whichever memory holds the operand, or the op's reference). Host calls split the
// chain where they fall; one step's host products go out as one batch. Same bytes any way.

import type { Chain } from '../kernels/chain.js';
import type { KdaBlockArgs, Kernels, MatmulOp } from '../kernels/fast.js';
import type { ActKind } from '../kernels/wasm/act.js';
import type { WeightView } from '../formats/weight.js';
import { viewNow, visitParts, visitWhole, type GatedMats, type Mat } from '../store/mat.js';
import type { Compute } from './compute.js';
import { linearManyInto, type LinearItem } from './linear.js';
import { gatherRowsRef, mlaAppendRef, mlaSoftmaxRef, moeCombineRef, rmsNorm, sigmoidGateRef } from './reference.js';

/** A JavaScript step (or a host op): runs after every call recorded before it. */
export type HostStep = () => void | Promise<void>;

/** A block's input still to compute (model/block-input.ts BlockInput): the AttnRes mix of the
 *  candidates with fold (none: cands[0] itself), then RMSNorm with norm. */
export interface InputOperands {
  cands: Float32Array[];
  fold: Float32Array | null;
  mixEps: number;
  norm: Float32Array;
  normEps: number;
  T: number;
  D: number;
}

export class Graph {
  /** In order: chained dispatches and runs of host steps. */
  private readonly segments: (Chain | HostStep[])[] = [];
  private open: Chain | null = null;
  /** This step's host products and host steps. */
  private products: (LinearItem & { y: Float32Array })[] = [];
  private views: MatmulOp[] = [];
  private hosts: HostStep[] = [];
  /** Whether a host step left weight memory allocated above the chains' arrays. */
  private grew = false;
  /** Segments run so far (start() runs those before the overlap point, run() the rest). */
  private ranTo = 0;
  /** Where overlap() was called: the first segment after it, and the steps before it of a chain that goes on past it. */
  private split: { seg: number; steps: number } | null = null;
  /** The chain start() launched, until join(). */
  private launched: Chain | null = null;

  /** home's arena top before the graph's arrays. */
  private readonly mark: number;

  /** `home`: the kernels chained calls go to (null: every call on the host); `placed`: the block's
   *  constants as placed in home's memory before the chains begin. */
  constructor(private readonly c: Compute, private readonly home: Kernels | null, private readonly placed: ReadonlyMap<Float32Array, Float32Array>) {
    this.mark = home?.mark() ?? 0;
  }

  private get chain(): Chain {
    if (!this.open) this.segments.push((this.open = this.home!.chain()));
    return this.open;
  }

  private constant(v: Float32Array): Float32Array {
    return this.placed.get(v) ?? v;
  }

  /** n floats valid until done() (in home's arena: what a host step writes must come from here). */
  alloc(n: number): Float32Array {
    return this.home ? this.home.allocF32(n) : new Float32Array(n);
  }

  /** Calls after this may read what the calls before it write. */
  next(): this {
    if (this.products.length || this.views.length || this.hosts.length) {
      const products = this.products, views = this.views;
      const batches = [...(products.length ? [() => linearManyInto(this.c, products)] : []), ...(views.length ? [() => this.c.matmulBatch(views)] : [])];
      this.segments.push([...batches, ...this.hosts]);
      this.products = [];
      this.views = [];
      this.hosts = [];
      this.open = null;
    } else this.open?.next();
    return this;
  }

  /** y = m · x over T rows (y given, or a new array). */
  matmul(m: Mat, x: Float32Array, T: number, y?: Float32Array): Float32Array {
    const v = this.home && viewNow(m);
    if (v && this.inHome(v.data)) return this.chain.matmul(v, x, T, y);
    const out = y ?? this.alloc(T * m.rows);
    this.products.push({ m, x, T, y: out });
    return out;
  }

  /** A JavaScript step of this step's calls (it may read what earlier steps wrote). */
  host(fn: HostStep): void {
    this.hosts.push(fn);
  }

  /** The block's input: x itself, or computed as this step's call; the next step begins. */
  input(x: Float32Array | InputOperands): Float32Array {
    if (x instanceof Float32Array) return x;
    const { cands, fold, T, D } = x;
    let out: Float32Array;
    if (this.home) out = this.chain.attnResNorm(cands, fold && this.constant(fold), x.mixEps, this.constant(x.norm), x.normEps, T, D);
    else {
      const y = (out = this.alloc(T * D));
      this.host(() => void inputNow(this.c, x, y));
    }
    this.next();
    return out;
  }

  /**
   * Gated MLPs y = down · act(gate · x, up · x), each into its y: one chain's three steps from the
   * current one (Chain.gatedMlps) when every weight lies in home, else the gate and up products,
   * the activations (Compute.gatedActBatch) and the down products, each where it can run. The
   * current step is then the down products'.
   */
  gatedMlps(items: readonly { w: GatedMats; x: Float32Array; T: number; y: Float32Array }[], kind: ActKind, b: number, bl: number | null): Float32Array[] {
    const views = this.home ? items.map(({ w }) => [w.gate, w.up, w.down].map(viewNow)) : null;
    if (views?.every((v) => v.every((m) => m && this.inHome(m.data)))) {
      return this.chain.gatedMlps(items.map(({ x, T, y }, k) => ({ gate: views![k]![0]!, up: views![k]![1]!, down: views![k]![2]!, x, T, y })), kind, b, bl);
    }
    const gu = items.map(({ w, x, T }) => [this.matmul(w.gate, x, T), this.matmul(w.up, x, T)] as const);
    this.next();
    const hs = gu.map(([g]) => this.alloc(g.length));
    this.host(() => this.c.gatedActBatch(gu.map(([gate, up], k) => ({ gate, up, out: hs[k]! })), kind, b, bl));
    this.next();
    return items.map(({ w, T, y }, k) => this.matmul(w.down, hs[k]!, T, y));
  }

  /** The KDA block (ops/kda-block.ts; reference kdaBlockRef): chained when the state and y lie in home's memory. */
  kdaBlock(a: KdaBlockArgs): void {
    if (this.inHome(a.S, a.conv, a.work, a.y)) {
      const k = (v: Float32Array): Float32Array => this.constant(v);
      this.chain.kdaBlock({ ...a, qConv: k(a.qConv), kConv: k(a.kConv), vConv: k(a.vConv), dtBias: k(a.dtBias), oNorm: k(a.oNorm) });
    } else this.host(() => this.c.kdaBlock(a));
  }

  /** Whether every array lies in home's memory (the call then chains). */
  private inHome(...arrays: ArrayBufferView[]): boolean {
    const h = this.home;
    return h !== null && arrays.every((a) => h.contains(a));
  }

  /** RMSNorm of T rows of n values of x with the constant w (reference rmsNorm). */
  rmsNorm(x: Float32Array, T: number, n: number, w: Float32Array, eps: number): Float32Array {
    if (this.inHome(x)) return this.chain.rmsNorm(x, T, n, this.constant(w), eps);
    const out = this.alloc(T * n);
    this.host(() => void rmsNorm(x, T, n, w, eps, out));
    return out;
  }

  /** T rows of kv_a's output a [T, Lk + dr]: the latent part normalized into lat, the rope part copied into rope (ops/mla-append.ts). */
  mlaAppend(a: Float32Array, T: number, Lk: number, dr: number, norm: Float32Array, eps: number, lat: Float32Array, rope: Float32Array): void {
    if (this.inHome(lat, rope)) return this.chain.mlaAppend(a, T, Lk, dr, this.constant(norm), eps, lat, rope);
    this.host(() => mlaAppendRef(a, T, Lk, dr, norm, eps, lat, rope));
  }

  mvtHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xStride: number, H: number, y: Float32Array): Float32Array {
    if (this.inHome(w.data)) return this.chain.mvtHeads(w, r0, rStride, n, x, xStride, H, y);
    this.host(() => this.c.matvecTHeads(w, r0, rStride, n, x, 0, xStride, y, H));
    return y;
  }

  /** y = w · x over T rows for a view (a row slice): chained when home holds it, else in this step's host batch. */
  matmulView(w: WeightView, x: Float32Array, T: number, y: Float32Array): Float32Array {
    if (this.inHome(w.data)) return this.chain.matmul(w, x, T, y);
    this.views.push({ w, x, T, y });
    return y;
  }

  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): Float32Array {
    if (this.inHome(lat, rope)) return this.chain.mlaScores(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out);
    this.host(() => this.c.mlaScores(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out));
    return out;
  }

  mlaSoftmax(sc: Float32Array, n: number, H: number): void {
    if (this.inHome(sc)) return this.chain.mlaSoftmax(sc, n, H);
    this.host(() => mlaSoftmaxRef(sc, n, H));
  }

  mlaWsum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): Float32Array {
    if (this.inHome(lat)) return this.chain.mlaWsum(P, lat, n, Lk, H, out);
    this.host(() => this.c.mlaWeightedSum(P, lat, n, Lk, H, out));
    return out;
  }

  /**
   * fn's calls on the whole view of m: recorded on this graph when m is resident, else as a host
   * step, on a host graph run inside m's visit (a streamed matrix's view lives only as long as that).
   */
  visitWhole(m: Mat, fn: (g: Graph, v: WeightView) => void): void {
    const v = viewNow(m);
    if (v) return fn(this, v);
    this.host(() => visitWhole(m, (w) => {
      const now = new Graph(this.c, null, new Map());
      fn(now, w);
      now.runNow();
    }));
  }

  /** Rows `rows` of src [*, cols], back to back (a MoE expert's tokens): chained when src lies in home, else a host step. */
  gatherRows(src: Float32Array, rows: readonly number[], cols: number): Float32Array {
    if (this.inHome(src)) return this.chain.gatherRows(src, rows, cols);
    const out = this.alloc(rows.length * cols);
    this.host(() => void gatherRowsRef(src, rows, cols, out));
    return out;
  }

  /** The routed sum of T MoE tokens over their K expert rows `ys` (t·K + j) with weights wts, then the latent norm (ops/moe-combine.ts; reference moeCombineRef). */
  moeCombine(ys: readonly Float32Array[], wts: Float32Array, T: number, K: number, zw: number, norm: Float32Array | null, eps: number): Float32Array {
    const n = norm && this.constant(norm);
    if (this.inHome(...ys, ...(n ? [n] : []))) return this.chain.moeCombine(Uint32Array.from(ys, (y) => y.byteOffset), wts, T, K, zw, n, eps);
    const out = this.alloc(T * zw);
    this.host(() => void moeCombineRef(ys, wts, T, K, zw, norm, eps, out));
    return out;
  }

  /** out[i] = f32(out[i] · σ(g[i])) in place (MLA's output gate). */
  sigmoidGate(out: Float32Array, g: Float32Array, n: number): void {
    if (this.inHome(out)) return this.chain.sigmoidGate(out, g, n);
    this.host(() => sigmoidGateRef(out, g, n));
  }

  /** The calls recorded after this may go on in the background of the caller's work (start()). */
  overlap(): void {
    this.next();
    // (an open chain is the last segment: a host call closes it)
    const steps = this.open?.closedSteps ?? 0;
    this.split = steps > 0 ? { seg: this.segments.length - 1, steps } : { seg: this.segments.length, steps: 0 };
  }

  /**
   * The calls recorded before overlap(), in order; a chain that goes on past that point is
   * launched (Chain.launch): this returns once its steps before the point are done and its
   * workers go on with the rest until join(). Host calls after the point wait for run().
   */
  async start(): Promise<void> {
    const { seg, steps } = this.split ?? { seg: this.segments.length, steps: 0 };
    this.open = null; // (calls recorded from here on go to chains of their own)
    for (; this.ranTo < seg; this.ranTo++) await this.runSegment(this.segments[this.ranTo]!);
    const s = this.segments[seg];
    if (steps > 0 && s && !Array.isArray(s)) {
      s.launch(steps);
      this.launched = s;
      this.ranTo++;
    }
  }

  /** Every call not run yet, in order. A chain start() launched goes on in its workers until join(). */
  async run(): Promise<void> {
    this.next();
    for (; this.ranTo < this.segments.length; this.ranTo++) await this.runSegment(this.segments[this.ranTo]!);
  }

  /** Every call not run yet, now: for a host graph whose steps are all synchronous (inside a visit). */
  runNow(): void {
    this.next();
    for (; this.ranTo < this.segments.length; this.ranTo++) {
      const s = this.segments[this.ranTo]!;
      if (!Array.isArray(s)) s.run();
      else for (const step of s) if (step() instanceof Promise) throw new Error('graph: runNow() met an asynchronous step');
    }
  }

  /** Waits for the chain start() launched: what it writes may be read after this. */
  join(): void {
    this.launched?.join();
    this.launched = null;
  }

  private async runSegment(s: Chain | HostStep[]): Promise<void> {
    if (!Array.isArray(s)) return s.run();
    this.join(); // (a JavaScript step may read what the launched chain writes)
    const m0 = this.home?.mark() ?? 0;
    for (const step of s) await step();
    if (this.home && this.home.mark() > m0) this.grew = true;
  }

  /** Frees the arrays alloc() and the chains gave (left in place when weight memory was
   *  allocated above them meanwhile: a first read; readResident before avoids it). */
  done(): void {
    if (this.grew) return;
    for (let i = this.segments.length - 1; i >= 0; i--) {
      const s = this.segments[i]!;
      if (!Array.isArray(s)) s.done();
    }
    this.home?.release(this.mark);
  }
}

/** A block's input computed now, into `out`: the AttnRes mix of the candidates when there is a
 *  fold (Compute.attnResMix), then RMSNorm; the host half of Graph.input. */
export function inputNow(c: Compute, x: InputOperands, out: Float32Array = new Float32Array(x.T * x.D)): Float32Array {
  const h = x.fold ? c.attnResMix(x.cands, x.T, x.D, x.fold, x.mixEps) : x.cands[0]!;
  return rmsNorm(h, x.T, x.D, x.norm, x.normEps, out);
}

/**
 * A graph for one block's calls on `c`: chained on the kernel memory that holds every array of
 * `near` (the block's state), with `consts` (constant vectors its calls take) placed there first;
 * on the host when there is none or a constant does not fit.
 */
export function graphFor(c: Compute, near: readonly ArrayBufferView[], consts: readonly Float32Array[]): Graph {
  const kk = near.length ? c.group?.ownerOf(near[0]!) : null;
  const placed = kk && near.every((a) => kk.contains(a)) ? c.placedNear(near[0]!, consts) : null;
  if (!kk || !placed || !placed.every((v) => kk.contains(v))) return new Graph(c, null, new Map());
  return new Graph(c, kk, new Map(consts.map((v, i) => [v, placed[i]!])));
}

/** A graph chained in the kernel memory that holds m's view (graphFor), on the host when m has none now. */
export function graphNear(c: Compute, m: Mat | null, consts: readonly Float32Array[]): Graph {
  const v = m && viewNow(m);
  return graphFor(c, v ? [v.data] : [], consts);
}

/**
 * `record`'s calls on a graph chained in the kernel memory of mats[0] (the first weight they
 * read), with `consts` placed there, run at once; returns what `record` returned. The resident
 * weights of `mats` are read first, so that no weight memory is allocated while it runs.
 */
export async function onGraph<R>(c: Compute, mats: readonly Mat[], consts: readonly Float32Array[], record: (g: Graph) => R): Promise<R> {
  await readResident(mats);
  const g = graphNear(c, mats[0] ?? null, consts);
  try {
    const out = record(g);
    await g.run();
    return out;
  } finally {
    g.done();
  }
}

/** Reads what of `mats` is resident and not read yet, so that no weight memory is allocated while a graph runs. */
export async function readResident(mats: readonly Mat[]): Promise<void> {
  for (const m of mats) if (m.resident && m.lease().kind === 'streamed') await visitParts(m, () => undefined);
}
