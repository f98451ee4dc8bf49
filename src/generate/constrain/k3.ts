// The constraint a K3 chat request asks for, from its OpenAI-style options: a JSON response
// (response_format json_object / json_schema), tool calls that must come (tool_choice required,
// or a named function: only that one), or calls held to their schemas once the model starts
// them (tool_choice auto). Reasoning and free content get at most half of the tokens left when
// they start, so that a model that never closes them is still brought to the reply it owes.

import type { Tokenizer } from '../../tokenizer/index.js';
import { UserError } from '../../util/errors.js';
import { GrammarConstraint, type TokenConstraint } from './constraint.js';
import { TokenGrammar } from './masks.js';
import { MAX_STATES, Matcher } from './matcher.js';
import { VocabIndex, CONTROL_NAMES } from './vocab.js';
import { replyGrammar, type ReplyGrammarOptions, type ToolSpec } from './xtml.js';

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema?: { schema?: unknown; json_schema?: unknown; name?: string; strict?: boolean } & Record<string, unknown> };

export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

export interface K3ReplyOptions {
  /** The prompt ends inside the think channel (K3's default), else inside the response channel. */
  thinking: boolean;
  responseFormat?: ResponseFormat | null;
  /** OpenAI tools ({type: 'function', function: {name, parameters}}) or flat {name, parameters}. */
  tools?: readonly unknown[] | null;
  toolChoice?: ToolChoice | null;
  /** false: exactly one call. Default true. */
  parallelToolCalls?: boolean;
  /** The model's vocabulary size, when it differs from the tokenizer's. */
  vocabSize?: number;
}

/** Share of the tokens left that reasoning / free content may take before what must follow. */
export const FREE_SHARE = 0.5;

function toolSpec(t: unknown, i: number): ToolSpec {
  const o = (t ?? {}) as Record<string, unknown>;
  const f = (o.type === 'function' && o.function && typeof o.function === 'object' ? o.function : o) as Record<string, unknown>;
  if (typeof f.name !== 'string' || f.name === '') throw new UserError(`tools[${i}]: a function needs a name`);
  return { name: f.name, parameters: f.parameters };
}

/** The schema of a json_schema response format (docs/spec/K3-CHAT.md §3.3: .schema, else .json_schema, else the object itself). */
function schemaOf(rf: ResponseFormat): unknown {
  if (rf.type === 'json_object') return { type: 'object' };
  if (rf.type !== 'json_schema') return undefined;
  const js = rf.json_schema;
  if (!js || typeof js !== 'object') throw new UserError('response_format: json_schema needs a json_schema object');
  return js.schema ?? js.json_schema ?? js;
}

/** What the grammar is, or null when nothing is constrained. */
export function k3GrammarOptions(o: K3ReplyOptions): ReplyGrammarOptions | null {
  const rf = o.responseFormat ?? undefined;
  const json = rf ? schemaOf(rf) : undefined;
  let tools = (o.tools ?? []).map(toolSpec);
  const choice = o.toolChoice ?? 'auto';
  let toolMode: ReplyGrammarOptions['toolMode'];
  if (tools.length > 0 && choice !== 'none') {
    if (typeof choice === 'object') {
      const name = choice.function?.name;
      tools = tools.filter((t) => t.name === name);
      if (tools.length === 0) throw new UserError(`tool_choice: no tool is named ${JSON.stringify(name)}`);
      toolMode = 'required';
    } else if (choice === 'required') toolMode = 'required';
    else toolMode = json === undefined ? 'lazy' : 'optional';
  }
  if (json === undefined && !toolMode) return null;
  return { thinking: o.thinking, json, tools: toolMode ? tools : [], toolMode, parallel: o.parallelToolCalls ?? true };
}

const indexes = new WeakMap<Tokenizer, Map<number, VocabIndex>>();

/** The vocabulary index of a tokenizer (built once per tokenizer and size: about a second for K3's 163840 ids). */
export function vocabIndex(tok: Tokenizer, V = tok.vocabSize): VocabIndex {
  let m = indexes.get(tok);
  if (!m) indexes.set(tok, (m = new Map()));
  let v = m.get(V);
  if (!v) m.set(V, (v = new VocabIndex(tok, V)));
  return v;
}

export interface K3Constraint extends TokenConstraint {
  /** Schema keywords that are not enforced (the value is still of an allowed type). */
  readonly unsupported: readonly string[];
}

/** The constraint of a K3 chat request, or null when nothing is to be constrained. */
export function k3ReplyConstraint(tok: Tokenizer, o: K3ReplyOptions): K3Constraint | null {
  const go = k3GrammarOptions(o);
  if (!go) return null;
  for (const [name] of CONTROL_NAMES) if (tok.specialId(name) === undefined) throw new UserError(`constrained output needs the K3 control token ${name} in the tokenizer`);
  const vocab = vocabIndex(tok, o.vocabSize ?? tok.vocabSize);
  const key = JSON.stringify(go);
  let entry = grammars.get(key);
  if (!entry || entry.vocab !== vocab || entry.g.matcher.size > MAX_STATES) {
    const { root, unsupported } = replyGrammar({ ...go, literalCost: (s) => vocab.literalCost(s) });
    entry = { vocab, g: new TokenGrammar(new Matcher(root), vocab), unsupported };
  }
  // the most recent last; the grammar's states and masks serve the next request with these options
  grammars.delete(key);
  grammars.set(key, entry);
  if (grammars.size > KEEP_GRAMMARS) grammars.delete(grammars.keys().next().value!);
  const c = new GrammarConstraint(entry.g, { reasoning: FREE_SHARE, content: FREE_SHARE });
  return Object.assign(c, { unsupported: entry.unsupported });
}

/** Compiled grammars kept for requests with the same options (each holds up to 64 MB of masks). */
const KEEP_GRAMMARS = 4;
const grammars = new Map<string, { vocab: VocabIndex; g: TokenGrammar; unsupported: string[] }>();
