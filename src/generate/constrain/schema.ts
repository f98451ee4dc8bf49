// JSON Schema -> alternatives of plain constraint records ("atoms"): anyOf / oneOf become a union,
// allOf is merged, $ref to #/$defs/... or #/definitions/... (or any local JSON pointer) is
// followed (recursion through properties and items is fine: children are nodes made on demand).
// A schema is a node: the list of its atoms. Keywords this does not enforce are collected in
// `unsupported` (the value produced is still of an allowed type). What it makes is described in
// schema-atoms.ts; the conjunctions it works on before that, in schema-conjunction.ts.

import { UserError } from '../../util/errors.js';
import { formatPattern } from './formats.js';
import { RegexError, parseRegex, type Re } from './regex.js';
import { searchOf } from './dfa.js';
import { K_ARR, K_BOOL, K_INT, K_NULL, K_NUM, K_OBJ, K_STR, Node, codePoints, kindOf, type Atom, type StrPattern } from './schema-atoms.js';
import { any, jsRegex, litFits, product, sameJson, tighter, type Cons, type ObjPart, type Schema } from './schema-conjunction.js';

const TYPE_KINDS: Record<string, number> = { null: K_NULL, boolean: K_BOOL, integer: K_INT, number: K_INT | K_NUM, string: K_STR, object: K_OBJ, array: K_ARR };

/** patternProperties past this many in one object are not held (free keys get a class per subset). */
const MAX_PAT_PROPS = 5;

/** multipleOf is held for integer divisors up to this (the automaton has a state per remainder). */
const MAX_MULTIPLE = 1000;

const ANNOTATIONS = new Set(['$schema', '$id', '$comment', '$defs', 'definitions', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly', 'strict', 'name', 'discriminator', 'xml', 'externalDocs', 'example']);
const HANDLED = new Set(['type', 'enum', 'const', 'nullable', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems', 'minItems', 'maxItems', 'minLength', 'maxLength', 'anyOf', 'oneOf', 'allOf', '$ref', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minProperties', 'maxProperties', 'multipleOf', 'patternProperties', 'propertyNames']);

const nonNegInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

export class SchemaCompiler {
  readonly unsupported = new Set<string>();
  private nodes: Node[] = [];
  private byList = new Map<string, Node>();
  private ids = new WeakMap<object, number>();
  private nextSchemaId = 2;
  private expanding = new Set<object>();
  private atomCount = 0;
  private paths: WeakMap<object, string> | null = null;

  constructor(readonly root: Schema, readonly where = 'schema') {}

  /** A subschema's JSON pointer in the root (the first place it occurs), for error messages. */
  private pathOf(s: object): string {
    if (!this.paths) {
      const paths = new WeakMap<object, string>();
      const walk = (v: unknown, p: string, depth: number): void => {
        if (v === null || typeof v !== 'object' || paths.has(v) || depth > 64) return;
        paths.set(v, p);
        for (const [k, x] of Object.entries(v)) walk(x, `${p}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, depth + 1);
      };
      walk(this.root, '', 0);
      this.paths = paths;
    }
    return this.paths.get(s) ?? '';
  }

  /** A pattern as a search (UserError naming where it is when it cannot be held). */
  private search(s: object, keyword: string, src: string): Re {
    try {
      return searchOf(parseRegex(src));
    } catch (e) {
      if (!(e instanceof RegexError)) throw e;
      throw new UserError(`${this.where}: ${this.pathOf(s)}/${keyword}: cannot hold ${e.message}`);
    }
  }

  private pattern(s: object, keyword: string, src: string, re: Re): StrPattern {
    return { re, src, key: `${keyword}:${src}`, where: `${this.where}: ${this.pathOf(s)}/${keyword}` };
  }

  private sid(s: Schema): number {
    if (s === true) return 0;
    if (s === false) return 1;
    let id = this.ids.get(s);
    if (id === undefined) this.ids.set(s, (id = this.nextSchemaId++));
    return id;
  }

  /** The node of all of these schemas at once (memoized, so recursive schemas end). */
  node(...schemas: Schema[]): Node {
    const list = schemas.filter((s) => s !== true);
    const key = list.map((s) => this.sid(s)).sort((a, b) => a - b).join(',');
    let n = this.byList.get(key);
    if (n) return n;
    n = new Node(this.nodes.length);
    this.nodes.push(n);
    this.byList.set(key, n);
    let cons = [any()];
    for (const s of list) cons = product(cons, this.consOf(s));
    n.atoms = cons.map((c) => this.atom(c)).filter((a): a is Atom => a !== null);
    return n;
  }

  get nodeCount(): number {
    return this.nodes.length;
  }

  allNodes(): readonly Node[] {
    return this.nodes;
  }

  private resolve(ref: string): Schema {
    if (!ref.startsWith('#')) throw new UserError(`${this.where}: $ref ${JSON.stringify(ref)}: only local references (#/$defs/..., #/definitions/...) are supported`);
    let cur: unknown = this.root;
    for (const raw of ref.slice(1).split('/').slice(1)) {
      const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, part)) throw new UserError(`${this.where}: $ref ${JSON.stringify(ref)} points nowhere`);
      cur = (cur as Record<string, unknown>)[part];
    }
    if (typeof cur !== 'boolean' && (cur === null || typeof cur !== 'object' || Array.isArray(cur))) throw new UserError(`${this.where}: $ref ${JSON.stringify(ref)} is not a schema`);
    return cur as Schema;
  }

  /** The alternatives (a disjunction of conjunctions) of one schema. */
  private consOf(s: Schema): Cons[] {
    if (s === true) return [any()];
    if (s === false) return [];
    if (s === null || typeof s !== 'object' || Array.isArray(s)) throw new UserError(`${this.where}: a schema must be an object or a boolean, got ${JSON.stringify(s)}`);
    // A $ref / anyOf loop that reads no character could only recurse: no value comes from it.
    if (this.expanding.has(s)) return [];
    this.expanding.add(s);
    try {
      let alts = [this.own(s)];
      if (typeof s.$ref === 'string') alts = product(alts, this.consOf(this.resolve(s.$ref)));
      for (const k of ['anyOf', 'oneOf'] as const) {
        const v = s[k];
        if (v === undefined) continue;
        if (!Array.isArray(v)) throw new UserError(`${this.where}: ${k} must be an array`);
        alts = product(alts, v.flatMap((x) => this.consOf(x as Schema)));
      }
      if (s.allOf !== undefined) {
        if (!Array.isArray(s.allOf)) throw new UserError(`${this.where}: allOf must be an array`);
        for (const x of s.allOf) alts = product(alts, this.consOf(x as Schema));
      }
      return alts;
    } finally {
      this.expanding.delete(s);
    }
  }

  /** The schema's own keywords (no combinators). */
  private own(s: Record<string, unknown>): Cons {
    const c = any();
    for (const k of Object.keys(s)) if (!HANDLED.has(k) && !ANNOTATIONS.has(k)) this.unsupported.add(k);
    const t = s.type;
    if (t !== undefined) {
      const names = Array.isArray(t) ? t : [t];
      let kinds = 0;
      for (const n of names) {
        if (typeof n !== 'string' || !(n in TYPE_KINDS)) throw new UserError(`${this.where}: unknown type ${JSON.stringify(n)}`);
        kinds |= TYPE_KINDS[n]!;
      }
      c.kinds = kinds;
    }
    if (s.nullable === true) c.kinds |= K_NULL;
    if (s.enum !== undefined) {
      if (!Array.isArray(s.enum)) throw new UserError(`${this.where}: enum must be an array`);
      c.lits = [...s.enum];
    }
    if (s.const !== undefined) c.lits = c.lits ? c.lits.filter((x) => sameJson(x, s.const)) : [s.const];
    if (nonNegInt(s.minLength)) c.minLength = s.minLength;
    if (nonNegInt(s.maxLength)) c.maxLength = s.maxLength;
    if (nonNegInt(s.minItems)) c.minItems = s.minItems;
    if (nonNegInt(s.maxItems)) c.maxItems = s.maxItems;
    if (s.multipleOf !== undefined) {
      const k = s.multipleOf;
      if (typeof k === 'number' && Number.isInteger(k) && k >= 1 && k <= MAX_MULTIPLE) {
        if (k > 1) c.mults.push(k);
        c.kinds &= ~K_NUM; // a multiple of an integer is an integer
      } else this.unsupported.add('multipleOf (past integers up to 1000)');
    }
    if (nonNegInt(s.minProperties)) c.minProps = s.minProperties;
    if (nonNegInt(s.maxProperties)) c.maxProps = s.maxProperties;
    if (Array.isArray(s.required)) for (const r of s.required) if (typeof r === 'string') c.required.add(r);
    if (typeof s.pattern === 'string') c.patterns.push(this.pattern(s, 'pattern', s.pattern, this.search(s, 'pattern', s.pattern)));
    if (typeof s.format === 'string') {
      const src = formatPattern(s.format);
      if (src !== undefined) c.patterns.push(this.pattern(s, 'format', src, parseRegex(src)));
      else this.unsupported.add(`format ${s.format}`);
    } else if (s.format !== undefined) this.unsupported.add('format');
    const num = (k: string): number | null => (typeof s[k] === 'number' && Number.isFinite(s[k]) ? (s[k] as number) : null);
    const lo = num('minimum');
    const hi = num('maximum');
    // draft 4 writes the exclusive forms as booleans beside minimum / maximum
    if (lo !== null) c.lo = { value: lo, strict: s.exclusiveMinimum === true };
    if (hi !== null) c.hi = { value: hi, strict: s.exclusiveMaximum === true };
    const xlo = num('exclusiveMinimum');
    const xhi = num('exclusiveMaximum');
    if (xlo !== null) c.lo = tighter(c.lo, { value: xlo, strict: true }, 1);
    if (xhi !== null) c.hi = tighter(c.hi, { value: xhi, strict: true }, -1);
    const props = s.properties;
    const ap = s.additionalProperties;
    const pp = s.patternProperties;
    const patProps: ObjPart['patProps'] = [];
    if (pp !== null && typeof pp === 'object' && !Array.isArray(pp)) {
      for (const [src, schema] of Object.entries(pp)) patProps.push({ pat: this.pattern(s, `patternProperties/${src.replace(/~/g, '~0').replace(/\//g, '~1')}`, src, this.search(s, 'patternProperties', src)), schema: schema as Schema });
    }
    if ((props !== undefined && typeof props === 'object' && props !== null) || ap !== undefined || patProps.length > 0) {
      const m = new Map<string, Schema>();
      if (props && typeof props === 'object') for (const [k, v] of Object.entries(props)) m.set(k, v as Schema);
      c.obj.push({ props: m, additional: ap === undefined ? true : (ap as Schema), patProps });
    }
    const pn = s.propertyNames;
    if (pn !== undefined && pn !== true) {
      const names = pn as Record<string, unknown>;
      const held = pn !== null && typeof pn === 'object' && Object.keys(names).every((k) => k === 'pattern' || k === 'type' || ANNOTATIONS.has(k)) && (names.type === undefined || names.type === 'string');
      if (held && typeof names.pattern === 'string') c.keyNames.push(this.pattern(names, 'pattern', names.pattern, this.search(names, 'pattern', names.pattern)));
      else if (!held) this.unsupported.add('propertyNames (past a pattern)');
    }
    const items = s.items;
    const prefixItems = Array.isArray(s.prefixItems) ? (s.prefixItems as Schema[]) : Array.isArray(items) ? (items as Schema[]) : null;
    if (prefixItems || (items !== undefined && !Array.isArray(items))) {
      const rest = Array.isArray(items) ? (s.additionalItems === undefined ? true : (s.additionalItems as Schema)) : items === undefined ? true : (items as Schema);
      c.arr.push({ prefix: prefixItems ?? [], items: rest });
    }
    return c;
  }

  /** Children become nodes; an impossible conjunction is null. */
  private atom(c: Cons): Atom | null {
    if (c.lits) {
      c.lits = c.lits.filter((v) => litHeld(v, c));
      if (c.lits.length === 0) return null;
    }
    if (c.minLength > c.maxLength) c.kinds &= ~K_STR;
    // Nodes are made in this order (declared keys, key classes, prefix, items, additional), which numbers them.
    const o = this.objectPart(c);
    const a = this.arrayPart(c);
    if (c.kinds === 0) return null;
    return {
      id: this.atomCount++,
      kinds: c.kinds,
      lits: c.lits,
      minLength: c.minLength,
      maxLength: c.maxLength,
      names: o.names,
      banned: o.banned,
      props: o.props,
      required: o.required,
      additional: o.additionalOk ? this.node(...o.addParts) : null,
      prefix: a.prefix,
      items: a.items,
      minItems: c.minItems,
      maxItems: a.maxItems,
      patterns: c.patterns,
      lo: c.lo,
      hi: c.hi,
      minProps: o.minProps,
      maxProps: c.maxProps,
      mults: c.mults,
      keyPats: o.keyPats,
      keyClasses: o.keyClasses,
      keyNames: c.keyNames,
    };
  }

  /** Object: every part (a conjunct's properties / additionalProperties) must accept a key. Clears K_OBJ when none can be written. */
  private objectPart(c: Cons) {
    const { names, props, banned } = this.declaredKeys(c);
    const addParts: Schema[] = [];
    let additionalOk = true;
    for (const p of c.obj) {
      if (p.additional === false) additionalOk = false;
      else addParts.push(p.additional);
    }
    const { keyPats, keyClasses } = this.keyClasses(c);
    if (keyClasses.length > 0) {
      // `additional` then only says that free keys may be written; their values come from keyClasses
      additionalOk = keyClasses.some((n) => n !== null);
      addParts.length = 0;
      addParts.push(...c.obj.map((p) => p.additional).filter((x) => x !== false));
    }
    const required = names.map((k, i) => (c.required.has(k) ? i : -1)).filter((i) => i >= 0);
    // minProperties is reached with declared keys (free keys are not told apart, so not counted)
    let minProps = c.minProps;
    if (minProps > names.length) {
      if (additionalOk) {
        this.unsupported.add('minProperties (past the declared keys)');
        minProps = 0;
      } else c.kinds &= ~K_OBJ;
    }
    if (required.length > c.maxProps || minProps > c.maxProps) c.kinds &= ~K_OBJ;
    return { names, props, banned, required, additionalOk, addParts, keyPats, keyClasses, minProps };
  }

  /** The declared and required keys: a value node for each key every part accepts, the others banned. */
  private declaredKeys(c: Cons): { names: string[]; props: Node[]; banned: string[] } {
    const names: string[] = [];
    const props: Node[] = [];
    const declared = new Set<string>();
    const banned: string[] = [];
    for (const p of c.obj) for (const k of p.props.keys()) declared.add(k);
    for (const r of c.required) declared.add(r);
    for (const k of declared) {
      const parts: Schema[] = [];
      let ok = c.keyNames.every((n) => jsRegex(n.src).test(k));
      for (const p of c.obj) {
        const matched = p.patProps.filter((x) => jsRegex(x.pat.src).test(k)).map((x) => x.schema);
        const own = p.props.has(k) ? [p.props.get(k)!, ...matched] : matched.length > 0 ? matched : [p.additional];
        if (own.includes(false)) ok = false;
        else parts.push(...own);
      }
      if (!ok) {
        if (c.required.has(k)) c.kinds &= ~K_OBJ;
        banned.push(k);
        continue;
      }
      names.push(k);
      props.push(this.node(...parts));
    }
    return { names, props, banned };
  }

  /** Free keys told apart by patternProperties: a value node per subset of the patterns matched (none without patterns or propertyNames). */
  private keyClasses(c: Cons): { keyPats: StrPattern[]; keyClasses: Array<Node | null> } {
    let keyPats = c.obj.flatMap((p) => p.patProps.map((x) => x.pat));
    if (keyPats.length > MAX_PAT_PROPS) {
      this.unsupported.add(`patternProperties (past ${MAX_PAT_PROPS} in one object)`);
      keyPats = [];
    }
    const keyClasses: Array<Node | null> = [];
    if (keyPats.length === 0 && c.keyNames.length === 0) return { keyPats, keyClasses };
    for (let mask = 0; mask < 1 << keyPats.length; mask++) {
      const parts: Schema[] = [];
      let ok = true;
      let bit = 0;
      for (const p of c.obj) {
        const own: Schema[] = [];
        for (const x of p.patProps) if (mask & (1 << bit++)) own.push(x.schema);
        if (own.length === 0) own.push(p.additional);
        if (own.includes(false)) ok = false;
        parts.push(...own);
      }
      keyClasses.push(ok ? this.node(...parts) : null);
    }
    return { keyPats, keyClasses };
  }

  /** Array: item j must satisfy every part's schema for position j. Clears K_ARR when minItems cannot be met. */
  private arrayPart(c: Cons): { prefix: Node[]; items: Node | null; maxItems: number } {
    let maxItems = c.maxItems;
    let prefixLen = 0;
    for (const a of c.arr) prefixLen = Math.max(prefixLen, a.prefix.length);
    const prefix: Node[] = [];
    for (let j = 0; j < prefixLen && j < maxItems; j++) {
      const parts: Schema[] = [];
      for (const a of c.arr) parts.push(j < a.prefix.length ? a.prefix[j]! : a.items);
      if (parts.includes(false)) {
        maxItems = j;
        break;
      }
      prefix.push(this.node(...parts));
    }
    let items: Node | null = null;
    const itemParts = c.arr.map((a) => a.items);
    if (!itemParts.includes(false) && maxItems > prefix.length) items = this.node(...itemParts);
    else maxItems = Math.min(maxItems, prefix.length);
    if (c.minItems > maxItems) c.kinds &= ~K_ARR;
    return { prefix, items, maxItems };
  }
}

/** A literal of enum / const is kept when the conjunction's kinds, bounds and lengths allow it. */
function litHeld(v: unknown, c: Cons): boolean {
  if ((kindOf(v) & c.kinds) === 0 && !((kindOf(v) & K_INT) && (c.kinds & K_NUM))) return false;
  if (!litFits(v, c)) return false;
  if (typeof v === 'string') {
    const n = codePoints(v);
    return n >= c.minLength && n <= c.maxLength;
  }
  return true;
}
