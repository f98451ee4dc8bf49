// The whole K3 reply as one grammar over symbols (docs/spec/K3-CHAT.md §3.5, §3.8): what follows the
// generation prompt, up to and including <|end_of_msg|>. Tool calls are
//   <|open|>call tool="NAME" index="K"<|sep|> ARG* <|close|>call<|sep|>
//   ARG = <|open|>argument key="KEY" type="T"<|sep|> VALUE <|close|>argument<|sep|>
// with keys the tool's declared properties (each at most once, the required ones before the
// call closes), T a type the property's schema allows, VALUE raw text for strings and JSON with
// Python's separators otherwise. K counts the calls from 1.

import { Alt, EMPTY, Lit, Seq, lazyG, newId, push, refeed, type Frame, type G, type Stack } from './core.js';
import { JsonCtx } from './json.js';
import { WsG } from './json-lexical.js';
import { owedKeys, rawStringMin, usedCount } from './minlen.js';
import { K_ARR, K_BOOL, K_INT, K_NULL, K_NUM, K_OBJ, K_STR, kindOf, type Node } from './schema-atoms.js';
import { SchemaCompiler } from './schema.js';
import { CLOSE, END, OPEN, SEP, syms } from './symbols.js';
import { FreeG, LazyFrame } from './text.js';
import { UserError } from '../../util/errors.js';

/** Attribute values as the renderer writes them (docs/spec/K3-CHAT.md §3.1): & first, then ". */
export const escAttr = (v: string): string => v.replace(/&/g, '&amp;').replace(/"/g, '&quot;');

export interface ToolSpec {
  name: string;
  /** JSON Schema of the arguments object (absent: no arguments). */
  parameters?: unknown;
}

const TYPE_NAMES: Array<[string, number]> = [
  ['string', K_STR], ['number', K_INT | K_NUM], ['boolean', K_BOOL], ['null', K_NULL], ['object', K_OBJ], ['array', K_ARR],
];

/** One tool compiled: its declared keys, each with the (type name, value grammar) pairs it allows. */
class CompiledTool {
  readonly id = newId();
  readonly names: string[] = [];
  readonly options: Array<Array<G>> = [];
  readonly required: number[] = [];
  readonly unsupported: string[];
  /** minProperties / maxProperties of the arguments object. */
  readonly minProps: number;
  readonly maxProps: number;
  private owedMemo = new Map<string, number>();

  constructor(readonly spec: ToolSpec, private readonly lit: (...p: Array<string | number>) => Lit) {
    const where = `tool ${JSON.stringify(spec.name)}: parameters`;
    const schema = spec.parameters === undefined ? { type: 'object', properties: {} } : spec.parameters;
    if (typeof schema !== 'boolean' && (schema === null || typeof schema !== 'object' || Array.isArray(schema))) throw new UserError(`${where} must be a JSON Schema object`);
    const comp = new SchemaCompiler(schema as Record<string, unknown>, where);
    const root = comp.node(schema as Record<string, unknown>);
    const ctx = new JsonCtx(comp.allNodes(), 'py');
    const atoms = root.atoms.filter((a) => a.kinds & K_OBJ && !a.lits);
    if (atoms.length === 0) throw new UserError(`${where}: no object satisfies it`);
    if (atoms.length > 1) comp.unsupported.add('anyOf of argument objects (the first is used)');
    const a = atoms[0]!;
    a.names.forEach((name, i) => {
      const gs = this.argOptions(ctx, name, a.props[i]!);
      this.names.push(name);
      this.options.push(gs);
      if (a.required.includes(i) && gs.length === 0) throw new UserError(`${where}: required argument ${JSON.stringify(name)} has no possible value`);
    });
    for (const r of a.required) this.required.push(r);
    this.minProps = a.minProps;
    this.maxProps = a.maxProps;
    if (a.names.length === 0 && a.additional) comp.unsupported.add('arguments not declared in properties');
    this.unsupported = [...comp.unsupported];
  }

  private argOptions(ctx: JsonCtx, key: string, node: Node): G[] {
    const out: G[] = [];
    for (const [tname, mask] of TYPE_NAMES) {
      const value = mask === K_STR ? (rawStringMin(node) < Infinity ? ctx.raw(node) : null) : ctx.mins.node(node, mask) < Infinity ? ctx.value(node, mask) : null;
      if (!value || !allowsKind(node, mask)) continue;
      out.push(new Seq([this.lit(OPEN, 'argument', ' key', '="', escAttr(key), '"', ' type', '="', tname, '"', SEP), value, this.lit(CLOSE, 'argument', SEP)]));
    }
    return out;
  }

  /** Fewest symbols of the arguments still owed (required ones, and enough for minProperties). */
  owedCost(used: string): number {
    return owedKeys((i) => this.argMin(i), this.names.length, this.required, used, this.minProps).cost;
  }

  /** Arguments still owed after `used`. */
  owedCount(used: string): number {
    let n = this.owedMemo.get(used);
    if (n === undefined) this.owedMemo.set(used, (n = owedKeys((i) => this.argMin(i), this.names.length, this.required, used, this.minProps).count));
    return n;
  }

  /** May the arguments go on to `usedAfter` (maxProperties)? */
  fits(usedAfter: string): boolean {
    return this.maxProps === Infinity || usedCount(usedAfter) + this.owedCount(usedAfter) <= this.maxProps;
  }

  argMin(i: number): number {
    let m = Infinity;
    for (const g of this.options[i]!) m = Math.min(m, g.min);
    return m;
  }
}

function allowsKind(node: Node, mask: number): boolean {
  return node.atoms.some((a) => (a.lits ? a.lits.some((v) => (kindOf(v) & mask) !== 0) : (a.kinds & mask) !== 0));
}

/** The arguments of a call: `used` marks the keys written. */
class ArgsFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly t: CompiledTool, readonly used: string) {
    this.key = `A${t.id}.${used}`;
    this.min = t.owedCost(used);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { t, used } = this;
    if (sym === OPEN) {
      for (let i = 0; i < t.names.length; i++) {
        if (used[i] === '1') continue;
        const u = used.slice(0, i) + '1' + used.slice(i + 1);
        if (!t.fits(u)) continue;
        const next = push(below, new ArgsFrame(t, u));
        for (const g of t.options[i]!) g.enter(next, sym, out);
      }
    } else if (t.owedCount(used) === 0) refeed(below, sym, out);
  }
}

class ArgsG implements G {
  readonly id = newId();
  private frame: ArgsFrame;
  constructor(t: CompiledTool) {
    this.frame = new ArgsFrame(t, '0'.repeat(t.names.length));
  }
  get min(): number {
    return this.frame.min;
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    this.frame.step(sym, below, out);
  }
}

export interface ReplyGrammarOptions {
  /** The prompt ends inside the think channel (else inside the response channel). */
  thinking: boolean;
  /** The response content is this JSON document (a schema; true = any JSON value). */
  json?: unknown;
  tools?: readonly ToolSpec[];
  /** 'required': at least one call (of `tools`; name one tool for a named choice); 'optional': calls may follow; 'lazy': free until the model opens a tools section. */
  toolMode?: 'required' | 'optional' | 'lazy';
  /** More than one call (default true). */
  parallel?: boolean;
  /** Fewest tokens that write each suffix of a literal (vocab.ts literalCost); default one a symbol. */
  literalCost?: (syms: readonly number[]) => number[];
}

export interface ReplyGrammar {
  root: G;
  /** Schema keywords not enforced, with where they are. */
  unsupported: string[];
}

export function replyGrammar(o: ReplyGrammarOptions): ReplyGrammar {
  const unsupported: string[] = [];
  const lit = (...p: Array<string | number>): Lit => {
    const s = syms(...p);
    return new Lit(s, o.literalCost?.(s));
  };
  const tools = (o.tools ?? []).map((t) => new CompiledTool(t, lit));
  for (const t of tools) for (const u of t.unsupported) unsupported.push(`tool ${t.spec.name}: ${u}`);
  let toolsBody: G | null = null;
  if (o.toolMode && tools.length > 0) {
    const parallel = o.parallel ?? true;
    const calls = new Map<number, G>();
    const call = (k: number): G => {
      let g = calls.get(k);
      if (!g) {
        const byTool = tools.map((t) => new Seq([lit(escAttr(t.spec.name), '"', ' index', '="', String(k), '"', SEP), new ArgsG(t)]));
        g = new Seq([lit(OPEN, 'call', ' tool', '="'), new Alt(byTool), lit(CLOSE, 'call', SEP)]);
        calls.set(k, g);
      }
      return g;
    };
    const more = (k: number): G => (parallel ? lazyG(() => 0, () => new Alt([new Seq([call(k), more(k + 1)]), EMPTY])) : EMPTY);
    toolsBody = new Seq([call(1), more(2), lit(CLOSE, 'tools', SEP)]);
  }
  if (o.toolMode === 'lazy') {
    if (!toolsBody) throw new Error('lazy tool mode needs tools');
    const body = new Seq([toolsBody, lit(CLOSE, 'message', SEP, END)]);
    const lazy = new LazyFrame(body, 0);
    const root: G = { id: newId(), min: 0, enter: (below, sym, out) => lazy.step(sym, below, out) };
    return { root, unsupported };
  }
  const items: G[] = [];
  if (o.thinking) items.push(new FreeG('reasoning'), lit(CLOSE, 'think', SEP, OPEN, 'response', SEP));
  if (o.json !== undefined) {
    const schema = o.json;
    const comp = new SchemaCompiler(schema as Record<string, unknown>, 'response_format schema');
    const node = comp.node(schema as Record<string, unknown>);
    const ctx = new JsonCtx(comp.allNodes(), 'json');
    if (ctx.mins.node(node) === Infinity) throw new UserError('response_format schema: no JSON value satisfies it');
    const ws = new WsG();
    items.push(ws, ctx.value(node), ws);
    for (const u of comp.unsupported) unsupported.push(`response_format: ${u}`);
  } else items.push(new FreeG('content'));
  items.push(lit(CLOSE, 'response', SEP));
  if (toolsBody) {
    const section = new Seq([lit(OPEN, 'tools', SEP), toolsBody]);
    items.push(o.toolMode === 'required' ? section : new Alt([section, EMPTY]));
  }
  items.push(lit(CLOSE, 'message', SEP, END));
  return { root: new Seq(items), unsupported };
}
