// Python-compatible JSON for the chat renderers (docs/spec/K3-CHAT.md §10): Moonshot renders tool specs,
// schemas and arguments with Python's `json.dumps`, whose float spelling (`1.0`, `1e-07`,
// `1e+16`), int/float distinction and key order JS's JSON does not keep. Values are plain JS
// JSON values, plus two wrappers the order- and number-preserving parser makes where plain JS
// would lose what Python keeps.

/** A number spelled exactly as Python holds it: an int beyond 2^53, or a float JS would turn
 *  into an int (`1.0`, `1e16`), or NaN / ±Infinity (which Python's json accepts). */
export class PyNum {
  constructor(
    /** The JSON text it was parsed from. */
    readonly text: string,
    readonly float: boolean,
  ) {}
  get value(): number {
    return Number(this.text);
  }
}

/** A dict in document (insertion) order, for keys a plain object would reorder (`"10"`, `"2"`). */
export class PyDict {
  constructor(readonly entries: [string, unknown][]) {}
  has(k: string): boolean {
    return this.entries.some(([key]) => key === k);
  }
  get(k: string): unknown {
    for (const [key, v] of this.entries) if (key === k) return v;
    return undefined;
  }
}

/** The (key, value) pairs of a dict in its order, or undefined when `v` is not a dict. */
export function dictEntries(v: unknown): [string, unknown][] | undefined {
  if (v instanceof PyDict) return v.entries;
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof PyNum)) return Object.entries(v);
  return undefined;
}

export function isDict(v: unknown): boolean {
  return dictEntries(v) !== undefined;
}

export interface DumpOptions {
  /** Item separator: `', '` is Python's default, `','` compact. */
  item?: string;
  /** Key separator: `': '` is Python's default, `':'` compact. */
  key?: string;
}

/** `json.dumps(v, ensure_ascii=False, separators=(item, key))`, keys in their order. */
export function pyDumps(v: unknown, opts: DumpOptions = {}): string {
  const item = opts.item ?? ', ';
  const key = opts.key ?? ': ';
  const out = (x: unknown): string => {
    if (x === null || x === undefined) return 'null';
    if (x === true) return 'true';
    if (x === false) return 'false';
    if (typeof x === 'string') return pyString(x);
    if (typeof x === 'number') return pyNumber(x);
    if (typeof x === 'bigint') return x.toString();
    if (x instanceof PyNum) return x.float ? pyFloatRepr(x.value) : x.text;
    if (Array.isArray(x)) return `[${x.map(out).join(item)}]`;
    const entries = dictEntries(x);
    if (entries) return `{${entries.map(([k, e]) => `${pyString(k)}${key}${out(e)}`).join(item)}}`;
    return pyString(String(x));
  };
  return out(v);
}

/** A JS number as Python writes it after `json.loads`: integral values as ints, others as floats. */
function pyNumber(x: number): string {
  if (Number.isInteger(x)) return Object.is(x, -0) ? '0' : BigInt(x).toString();
  return pyFloatRepr(x);
}

/** Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 or from 1e16. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (x === Infinity) return 'Infinity';
  if (x === -Infinity) return '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const m = /^(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(Math.abs(x).toExponential());
  if (!m) throw new Error(`pyFloatRepr: unexpected ${x}`);
  const digits = m[1]! + (m[2] ?? '');
  const exp = Number(m[3]);
  if (exp < -4 || exp >= 16) {
    const mant = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${mant}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  const int = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
  return `${sign}${int}.${digits.slice(exp + 1) || '0'}`;
}

const ESCAPES: Record<string, string> = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f' };

/** A JSON string as Python writes it with ensure_ascii=False (only `"`, `\` and C0 escaped). */
export function pyString(s: string): string {
  // eslint-disable-next-line no-control-regex
  return `"${s.replace(/["\\\u0000-\u001f]/g, (c) => ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}"`;
}

/** Compare by code point (Python's str order); JS `<` compares UTF-16 units. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // A surrogate (astral code point) sorts above every BMP unit, U+E000..U+FFFF included.
    const sx = x >= 0xd800 && x <= 0xdfff;
    const sy = y >= 0xd800 && y <= 0xdfff;
    if (sx !== sy) return sx ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/** Every dict's keys sorted by code point at every depth (Python `sorted`); lists keep order. */
export function deepSort(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(deepSort);
  const entries = dictEntries(v);
  if (!entries) return v;
  const sorted = [...entries].sort(([a], [b]) => compareCodePoints(a, b));
  return new PyDict(sorted.map(([k, x]) => [k, deepSort(x)]));
}

export class PyJsonError extends Error {}

const INT_KEY = /^(0|[1-9]\d*)$/;

/**
 * `json.loads(text)` keeping what Python keeps: ints and floats stay apart (a float JS would
 * spell as an int becomes a PyNum), objects keep document order (a PyDict when a plain object
 * would reorder its keys), the last of duplicate keys wins in the first one's place, and NaN /
 * Infinity / -Infinity are accepted. Throws PyJsonError where Python raises JSONDecodeError.
 */
export function pyLoads(text: string): unknown {
  const r = new PyJsonReader(text);
  const v = r.value();
  r.ws();
  if (r.i < text.length) r.fail('extra data');
  return v;
}

const SIMPLE_ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const NUM = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;

/** pyLoads' recursive descent: one method per JSON production, `i` the next char. */
class PyJsonReader {
  i = 0;

  constructor(readonly text: string) {}

  fail(what: string): never {
    throw new PyJsonError(`${what} at char ${this.i}`);
  }

  ws(): void {
    const text = this.text;
    while (this.i < text.length && (text[this.i] === ' ' || text[this.i] === '\t' || text[this.i] === '\n' || text[this.i] === '\r')) this.i++;
  }

  value(): unknown {
    this.ws();
    const c = this.text[this.i];
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return this.str();
    for (const [word, v] of [
      ['null', null],
      ['true', true],
      ['false', false],
      ['NaN', new PyNum('NaN', true)],
      ['Infinity', new PyNum('Infinity', true)],
      ['-Infinity', new PyNum('-Infinity', true)],
    ] as const) {
      if (this.text.startsWith(word, this.i)) {
        this.i += word.length;
        return v;
      }
    }
    return this.number();
  }

  private str(): string {
    const text = this.text;
    this.i++; // opening quote
    let s = '';
    for (;;) {
      const j = this.i;
      while (this.i < text.length && text[this.i] !== '"' && text[this.i] !== '\\' && text.charCodeAt(this.i) >= 0x20) this.i++;
      s += text.slice(j, this.i);
      if (this.i >= text.length) this.fail('unterminated string');
      const c = text[this.i]!;
      if (c === '"') {
        this.i++;
        return s;
      }
      if (c !== '\\') this.fail('invalid control character');
      const e = text[this.i + 1];
      if (e !== undefined && SIMPLE_ESCAPES[e] !== undefined) {
        s += SIMPLE_ESCAPES[e];
        this.i += 2;
      } else if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(this.i + 2, this.i + 6))) {
        s += String.fromCharCode(parseInt(text.slice(this.i + 2, this.i + 6), 16));
        this.i += 6;
      } else this.fail('invalid escape');
    }
  }

  /** A dict in document order, the last of duplicate keys in the first one's place. */
  private object(): unknown {
    const text = this.text;
    this.i++;
    const entries: [string, unknown][] = [];
    const at = new Map<string, number>();
    this.ws();
    if (text[this.i] === '}') {
      this.i++;
      return {};
    }
    for (;;) {
      this.ws();
      if (text[this.i] !== '"') this.fail('expecting property name');
      const k = this.str();
      this.ws();
      if (text[this.i] !== ':') this.fail("expecting ':'");
      this.i++;
      const v = this.value();
      const pos = at.get(k);
      if (pos === undefined) {
        at.set(k, entries.length);
        entries.push([k, v]);
      } else entries[pos]![1] = v;
      this.ws();
      if (text[this.i] === ',') this.i++;
      else if (text[this.i] === '}') {
        this.i++;
        break;
      } else this.fail("expecting ',' or '}'");
    }
    if (entries.some(([k]) => INT_KEY.test(k))) return new PyDict(entries);
    const o: Record<string, unknown> = {};
    for (const [k, v] of entries) Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
    return o;
  }

  private array(): unknown[] {
    const text = this.text;
    this.i++;
    const a: unknown[] = [];
    this.ws();
    if (text[this.i] === ']') {
      this.i++;
      return a;
    }
    for (;;) {
      a.push(this.value());
      this.ws();
      if (text[this.i] === ',') this.i++;
      else if (text[this.i] === ']') {
        this.i++;
        return a;
      } else this.fail("expecting ',' or ']'");
    }
  }

  /** Ints and floats kept apart: a float JS would spell as an int, or an int past 2^53, is a PyNum. */
  private number(): unknown {
    NUM.lastIndex = this.i;
    const m = NUM.exec(this.text);
    if (!m) return this.fail('expecting value');
    this.i += m[0].length;
    const n = Number(m[0]);
    if (m[1] === undefined && m[2] === undefined) return Number.isSafeInteger(n) ? n : new PyNum(m[0], false);
    return Number.isInteger(n) || !Number.isFinite(n) ? new PyNum(m[0], true) : n;
  }
}
