// Regular languages over the UTF-8 bytes of a string: each pattern becomes a Thompson NFA over
// byte ranges (anchors as edges taken only at the start / at the end), several patterns are
// intersected by building their DFA on tuples of NFA state sets, and the DFA only accepts valid
// UTF-8 (its states carry the UTF-8 decoder's state).

import { ANY, utf8Seqs } from './charset.js';
import { ANY_STRING, RegexError, type Re } from './regex.js';
import { utf8Next } from './symbols.js';

const NFA_LIMIT = 60_000;
/** DFA states past this: the pattern is refused as too complex. */
export const DFA_LIMIT = 4000;

class Nfa {
  eps: number[][] = [];
  bol: number[][] = [];
  eol: number[][] = [];
  /** [lo, hi, to, lo, hi, to, ...] per state. */
  ranges: number[][] = [];
  readonly start: number;
  readonly final: number;

  constructor(re: Re) {
    this.start = this.state();
    this.final = this.build(re, this.start);
  }

  state(): number {
    if (this.eps.length >= NFA_LIMIT) throw new RegexError('the pattern is too large to hold');
    this.eps.push([]);
    this.bol.push([]);
    this.eol.push([]);
    this.ranges.push([]);
    return this.eps.length - 1;
  }

  /** Add `re` from state `from`; returns its end state. */
  private build(re: Re, from: number): number {
    switch (re.t) {
      case 'set': {
        const end = this.state();
        for (const seq of utf8Seqs(re.s)) {
          let cur = from;
          for (let k = 0; k < seq.length; k += 2) {
            const to = k + 2 === seq.length ? end : this.state();
            this.ranges[cur]!.push(seq[k]!, seq[k + 1]!, to);
            cur = to;
          }
        }
        return end;
      }
      case 'seq': {
        let cur = from;
        for (const r of re.items) cur = this.build(r, cur);
        return cur;
      }
      case 'alt': {
        const end = this.state();
        for (const o of re.opts) {
          const s = this.state();
          this.eps[from]!.push(s);
          this.eps[this.build(o, s)]!.push(end);
        }
        return end;
      }
      case 'bol':
      case 'eol': {
        const to = this.state();
        (re.t === 'bol' ? this.bol : this.eol)[from]!.push(to);
        return to;
      }
      case 'rep': {
        let cur = from;
        for (let k = 0; k < re.min; k++) cur = this.build(re.r, cur);
        if (re.max === Infinity) {
          const loop = this.state();
          this.eps[cur]!.push(loop);
          const s = this.state();
          this.eps[loop]!.push(s);
          this.eps[this.build(re.r, s)]!.push(loop);
          return loop;
        }
        const end = this.state();
        this.eps[cur]!.push(end);
        for (let k = re.min; k < re.max; k++) {
          const s = this.state();
          this.eps[cur]!.push(s);
          cur = this.build(re.r, s);
          this.eps[cur]!.push(end);
        }
        return end;
      }
    }
  }

  /** The states reachable from `set` on empty moves (anchors when allowed), sorted. */
  closure(set: Iterable<number>, atStart: boolean, atEnd: boolean): number[] {
    const seen = new Set<number>();
    const stack = [...set];
    while (stack.length > 0) {
      const s = stack.pop()!;
      if (seen.has(s)) continue;
      seen.add(s);
      for (const t of this.eps[s]!) stack.push(t);
      if (atStart) for (const t of this.bol[s]!) stack.push(t);
      if (atEnd) for (const t of this.eol[s]!) stack.push(t);
    }
    return [...seen].sort((a, b) => a - b);
  }
}

/** A deterministic automaton given by its moves (a language no short regex writes: multiples of k). */
export interface Component {
  readonly start: number;
  /** Next state, or -1. */
  next(s: number, b: number): number;
  accept(s: number): boolean;
}

/** Integer text (optional '-', digits) whose value is a multiple of k: the state is the remainder so far. */
export function multipleOfText(k: number): Component {
  const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39;
  return {
    start: 0,
    next: (s, b) => (s === 0 && b === 0x2d ? 1 : isDigit(b) ? 2 + ((s < 2 ? 0 : (s - 2) * 10) + (b - 0x30)) % k : -1),
    accept: (s) => s === 2,
  };
}

/** JSON Schema's `pattern` is a search: any text may come before and after the match. */
export const searchOf = (re: Re): Re => ({ t: 'seq', items: [ANY_STRING, re, ANY_STRING] });

export class Dfa {
  private static count = 0;
  readonly id = Dfa.count++;
  /** trans[q * 256 + b]: next state, -1 dead. */
  readonly trans: Int32Array;
  readonly accept: Uint8Array;
  /** Bit k set: regex k accepts in q (the first 31). */
  readonly bits: Int32Array;
  /** Every component accepts in q. */
  readonly compOk: Uint8Array;
  /** The UTF-8 decoder's state in q (0: between characters). */
  readonly phase: Uint8Array;
  readonly size: number;
  private univ: Uint8Array | null = null;

  /** The strings (valid UTF-8) that every regex matches in full (wrap with searchOf for a search). */
  constructor(res: readonly Re[], comps: readonly Component[] = []) {
    const nfas = res.map((r) => new Nfa(r));
    const nn = nfas.length;
    const ids = new Map<string, number>();
    const sets: number[][][] = [];
    const phases: number[] = [];
    const trans: number[] = [];
    const accept: number[] = [];
    const bits: number[] = [];
    const compOk: number[] = [];
    const intern = (tuple: number[][], phase: number): number => {
      const key = `${phase};${tuple.map((s) => s.join(',')).join(';')}`;
      let id = ids.get(key);
      if (id === undefined) {
        id = sets.length;
        if (id >= DFA_LIMIT) throw new RegexError(`the pattern needs more than ${DFA_LIMIT} automaton states`);
        ids.set(key, id);
        sets.push(tuple);
        phases.push(phase);
      }
      return id;
    };
    intern([...nfas.map((n) => n.closure([n.start], true, false)), ...comps.map((c) => [c.start])], 0);
    for (let q = 0; q < sets.length; q++) {
      const tuple = sets[q]!;
      let mask = 0;
      let all = true;
      nfas.forEach((n, k) => {
        if (n.closure(tuple[k]!, q === 0, true).includes(n.final)) mask |= k < 31 ? 1 << k : 0;
        else all = false;
      });
      const cok = comps.every((c, k) => c.accept(tuple[nn + k]![0]!));
      bits.push(mask);
      compOk.push(cok ? 1 : 0);
      accept.push(all && cok ? 1 : 0);
      const buckets = nfas.map((n, k) => {
        const by: Array<number[] | undefined> = new Array(256);
        for (const s of tuple[k]!) {
          const rs = n.ranges[s]!;
          for (let i = 0; i < rs.length; i += 3) for (let b = rs[i]!; b <= rs[i + 1]!; b++) (by[b] ??= []).push(rs[i + 2]!);
        }
        return by;
      });
      // bytes with the same targets (a class's letters) share one closure
      const seen = new Map<string, number>();
      for (let b = 0; b < 256; b++) {
        const ph = utf8Next(phases[q]!, b);
        let next = -1;
        const cs = comps.map((c, k) => c.next(tuple[nn + k]![0]!, b));
        if (ph >= 0 && buckets.every((by) => by[b]) && cs.every((s) => s >= 0)) {
          const key = `${ph};${buckets.map((by) => by[b]!.join(',')).join(';')};${cs.join(',')}`;
          const have = seen.get(key);
          if (have !== undefined) next = have;
          else seen.set(key, (next = intern([...nfas.map((n, k) => n.closure(buckets[k]![b]!, false, false)), ...cs.map((s) => [s])], ph)));
        }
        trans.push(next);
      }
    }
    this.size = sets.length;
    this.trans = Int32Array.from(trans);
    this.accept = Uint8Array.from(accept);
    this.bits = Int32Array.from(bits);
    this.compOk = Uint8Array.from(compOk);
    this.phase = Uint8Array.from(phases);
  }

  next(q: number, b: number): number {
    return this.trans[q * 256 + b]!;
  }

  /** From q every valid UTF-8 continuation is accepted (the pattern no longer restricts anything). */
  universal(q: number): boolean {
    if (!this.univ) {
      const bad = new Uint8Array(this.size);
      for (let q2 = 0; q2 < this.size; q2++) {
        if (this.phase[q2] === 0 && !this.accept[q2]) bad[q2] = 1;
        for (let b = 0; b < 256 && !bad[q2]; b++) if (utf8Next(this.phase[q2]!, b) >= 0 && this.trans[q2 * 256 + b]! < 0) bad[q2] = 1;
      }
      for (let changed = true; changed;) {
        changed = false;
        for (let q2 = 0; q2 < this.size; q2++) {
          if (bad[q2]) continue;
          for (let b = 0; b < 256; b++) {
            const t = this.trans[q2 * 256 + b]!;
            if (t >= 0 && bad[t]) {
              bad[q2] = 1;
              changed = true;
              break;
            }
          }
        }
      }
      this.univ = bad.map((x) => 1 - x);
    }
    return this.univ[q] === 1;
  }
}

/** Whole-string regexes from `pattern` sources, as one DFA (their intersection). */
export function dfaOf(res: readonly Re[]): Dfa {
  return new Dfa(res.length > 0 ? res : [{ t: 'rep', r: { t: 'set', s: ANY }, min: 0, max: Infinity }]);
}
