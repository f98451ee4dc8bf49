// Numeric bounds as regular languages of JSON number text: a bound compares a number's integer
// digits by length then digit by digit, and its fraction digit by digit, so x >= L, x > L,
// x <= H and x < H are regexes, intersected with the number syntax (no exponent when bounded,
// the digit limits of json-number.ts). Decimal comparisons are exact on the text of the bound.

/** Digits allowed in a number's integer part, fraction and exponent (keeps every value finite and, for integers, exact). */
export const INT_DIGITS = 15;
export const FRAC_DIGITS = 20;
export const EXP_DIGITS = 2;

export interface Bound {
  value: number;
  strict: boolean;
}

/** Integer digits (no leading zeros, "0" for zero) and fraction digits (no trailing zeros) of |v|. */
export function decimalParts(v: number): [string, string] {
  let s = Math.abs(v).toString();
  const m = /^(\d+)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (m) {
    const digits = m[1]! + (m[2] ?? '');
    const point = m[1]!.length + Number(m[3]);
    s = point <= 0 ? `0.${'0'.repeat(-point)}${digits}` : point >= digits.length ? digits + '0'.repeat(point - digits.length) : `${digits.slice(0, point)}.${digits.slice(point)}`;
  }
  const [i, f = ''] = s.split('.');
  return [i!.replace(/^0+(?=\d)/, ''), f.replace(/0+$/, '')];
}

const NEVER = '[]';
const alt = (xs: string[]): string => (xs.length === 0 ? NEVER : `(${xs.join('|')})`);
const digit = (lo: number, hi: number): string => (lo === hi ? String(lo) : `[${lo}-${hi}]`);
const ANY_FRAC = '(\\.[0-9]+)?';

function intGt(n: string): string[] {
  const out = [`[1-9][0-9]{${n.length},}`];
  for (let i = 0; i < n.length; i++) {
    const d = Number(n[i]);
    if (d < 9) out.push(`${n.slice(0, i)}${digit(d + 1, 9)}${'[0-9]'.repeat(n.length - i - 1)}`);
  }
  return out;
}

function intLt(n: string): string[] {
  const out: string[] = [];
  if (n.length >= 2) out.push('0', `[1-9][0-9]{0,${n.length - 2}}`);
  for (let i = 0; i < n.length; i++) {
    const d = Number(n[i]);
    const lo = i === 0 && n.length > 1 ? 1 : 0;
    if (lo <= d - 1) out.push(`${n.slice(0, i)}${digit(lo, d - 1)}${'[0-9]'.repeat(n.length - i - 1)}`);
  }
  return out;
}

/** Fractions (with their point, or none) above / at least / at most / below .G. */
function frac(g: string, op: 'gt' | 'ge' | 'le' | 'lt'): string {
  const out: string[] = [];
  if (op === 'gt' || op === 'ge') {
    for (let i = 0; i < g.length; i++) {
      const d = Number(g[i]);
      if (d < 9) out.push(`\\.${g.slice(0, i)}${digit(d + 1, 9)}[0-9]*`);
    }
    out.push(`\\.${g}0*[1-9][0-9]*`);
    if (op === 'ge') out.push(g === '' ? '(\\.0+)?' : `\\.${g}0*`);
  } else {
    for (let i = 0; i < g.length; i++) {
      const d = Number(g[i]);
      if (d > 0) out.push(`\\.${g.slice(0, i)}${digit(0, d - 1)}[0-9]*`);
    }
    const kmax = op === 'le' ? g.length : g.length - 1;
    for (let k = 1; k <= kmax; k++) out.push(`\\.${g.slice(0, k)}0*`);
    if (kmax >= 0) out.push('(\\.0+)?');
  }
  return alt(out);
}

/** Non-negative number text y with y OP M (M = n.g). */
function cmp(n: string, g: string, op: 'gt' | 'ge' | 'le' | 'lt', intOnly: boolean): string {
  const rest = intOnly ? '' : ANY_FRAC;
  const head = alt((op === 'gt' || op === 'ge' ? intGt(n) : intLt(n)).map((x) => x + rest));
  const f = intOnly ? (op === 'ge' && g === '') || op === 'le' || (op === 'lt' && g !== '') ? '' : NEVER : frac(g, op);
  return `(${head}|${n}${f})`;
}

/** The regexes (whole-text) of a number at least `lo` / at most `hi`, and the syntax. */
export function numberRegexes(lo: Bound | null, hi: Bound | null, intOnly: boolean, intDigits = INT_DIGITS, fracDigits = FRAC_DIGITS): string[] {
  const out = [intOnly ? `^-?(0|[1-9][0-9]{0,${intDigits - 1}})$` : `^-?(0|[1-9][0-9]{0,${intDigits - 1}})(\\.[0-9]{1,${fracDigits}})?$`];
  if (lo) {
    const [n, g] = decimalParts(lo.value);
    const neg = lo.value < 0;
    if (!neg) out.push(`^${cmp(n, g, lo.strict ? 'gt' : 'ge', intOnly)}$`);
    else out.push(`^([0-9].*|-${cmp(n, g, lo.strict ? 'lt' : 'le', intOnly)})$`);
  }
  if (hi) {
    const [n, g] = decimalParts(hi.value);
    const pos = hi.strict ? hi.value > 0 : hi.value >= 0;
    if (pos) out.push(`^(-.*|${cmp(n, g, hi.strict ? 'lt' : 'le', intOnly)})$`);
    else out.push(`^-${cmp(n, g, hi.strict ? 'gt' : 'ge', intOnly)}$`);
  }
  return out;
}
