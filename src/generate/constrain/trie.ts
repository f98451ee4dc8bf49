// A small byte trie of fixed strings (enum literals, declared keys), with the fewest bytes from
// each node to the end of some string.

export class ByteTrie {
  private static count = 0;
  readonly id = ByteTrie.count++;
  private kids: Array<Map<number, number>> = [new Map()];
  readonly terminal: boolean[] = [false];
  private rest: number[] | null = null;

  constructor(strings: Iterable<readonly number[]>) {
    for (const s of strings) {
      let n = 0;
      for (const b of s) {
        let c = this.kids[n]!.get(b);
        if (c === undefined) {
          c = this.kids.length;
          this.kids.push(new Map());
          this.terminal.push(false);
          this.kids[n]!.set(b, c);
        }
        n = c;
      }
      this.terminal[n] = true;
    }
  }

  get empty(): boolean {
    return this.kids.length === 1 && !this.terminal[0];
  }

  /** The bytes that lead on from `node`. */
  childBytes(node: number): ReadonlySet<number> {
    return new Set(this.kids[node]!.keys());
  }

  /** Child of `node` by byte `b`, or -1. */
  next(node: number, b: number): number {
    return this.kids[node]!.get(b) ?? -1;
  }

  /** Fewest bytes from `node` to the end of a string. */
  minRest(node: number): number {
    if (!this.rest) {
      // Children are numbered after their parents: one pass from the last node back.
      const r = new Array<number>(this.kids.length).fill(Infinity);
      for (let n = this.kids.length - 1; n >= 0; n--) {
        let m = this.terminal[n] ? 0 : Infinity;
        for (const c of this.kids[n]!.values()) m = Math.min(m, 1 + r[c]!);
        r[n] = m;
      }
      this.rest = r;
    }
    return this.rest[node]!;
  }
}
