import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIds, parseIntFlag, readTextFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, checkModelDir, loadForCommand, loadOptionsFromFlags } from './common.js';
import { stopOnSignals } from './signals.js';
import { loadConfig } from '../api/diagnostics.js';
import { formatSummary, overBudgetWarning, Sampler, type SamplingOptions } from '../api/decoding.js';
import { checkTokenizerFits, loadTokenizer, renderChat, type ChatMessage, type Tokenizer } from '../api/tokens.js';
import { UserError } from '../util/errors.js';

/** Sampling flags shared by `k3 run` and `k3 chat`. */
export const SAMPLING_OPTIONS = {
  temperature: { type: 'string' },
  'top-k': { type: 'string' },
  'top-p': { type: 'string' },
  'min-p': { type: 'string' },
  'repeat-penalty': { type: 'string' },
  'repeat-last-n': { type: 'string' },
  'presence-penalty': { type: 'string' },
  'frequency-penalty': { type: 'string' },
  seed: { type: 'string', short: 's' },
  stop: { type: 'string', multiple: true },
  'max-tokens': { type: 'string', short: 'n' },
  'ignore-eos': { type: 'boolean' },
  spec: { type: 'string' },
} as const;

export const SAMPLING_HELP = `sampling options (applied in llama.cpp's order: penalties, top-k, top-p, min-p, temperature):
  --temperature T        0 = greedy (default: argmax, first maximum wins); < 1 sharpens, > 1 flattens
  --top-k K              keep the K most likely tokens (0 = all, default)
  --top-p P              keep the smallest set of most likely tokens whose probability reaches P (default 1)
  --min-p P              drop tokens less likely than P times the most likely one (default 0)
  --repeat-penalty R     divide positive / multiply negative logits of seen tokens by R (default 1)
  --repeat-last-n N      only the last N tokens count as seen (default 0 = prompt + everything generated)
  --presence-penalty A   subtract A from the logit of every seen token (default 0)
  --frequency-penalty A  subtract A times its count from the logit of every seen token (default 0)
  -s, --seed N           seed of the random draws (default 0): same seed and flags, same text;
                         -1: a random seed, printed on stderr
  --stop STRING          stop when the text contains STRING (repeatable; matched across tokens, not printed)
  --ignore-eos           do not stop at the end-of-message / eos tokens
  --spec N               speculative decoding: draft up to N tokens that followed the longest earlier
                         match of the text so far (when it is long and agreed on), verify them in one
                         forward (default 0 = off); greedy output is the same bytes, sampled output
                         keeps its distribution (same text for a seed)`;

export interface SamplingFlags {
  temperature?: string;
  'top-k'?: string;
  'top-p'?: string;
  'min-p'?: string;
  'repeat-penalty'?: string;
  'repeat-last-n'?: string;
  'presence-penalty'?: string;
  'frequency-penalty'?: string;
  seed?: string;
}

function parseNumber(cmd: string, name: string, s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  const v = Number(s);
  if (s.trim() === '' || !Number.isFinite(v)) throw new UserError(`${cmd}: --${name} must be a number, got ${JSON.stringify(s)}`);
  return v;
}

/** Text -> what is safe and readable on a terminal: no special-token strings, no C0/C1 control
 *  characters but newline and tab, no U+FFFD. */
function printable(tok: Tokenizer): (s: string) => string {
  const specials = [...tok.specials.keys()].sort((a, b) => b.length - a.length).map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp([...specials, '[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\ufffd]'].join('|'), 'gu');
  return (s) => s.replace(re, '');
}

/** `--seed -1` (llama.cpp's "random seed"): a fresh seed, printed so the run can be repeated. */
function randomSeed(cmd: string): number {
  const seed = Math.floor(Math.random() * 2 ** 31);
  process.stderr.write(`${cmd}: --seed -1: using seed ${seed}\n`);
  return seed;
}

/** Sampling flags -> options (ranges are checked by the Sampler, as UserErrors). */
export const DRAFTER_OPTIONS = { drafter: { type: 'string' }, 'spec-width': { type: 'string' } } as const;

export const DRAFTER_HELP = `  --drafter DIR     draft with a DSpark checkpoint (docs/DSPARK.md): its block of proposals from K3's
                    tapped states, verified in one forward; greedy output is the same bytes as
                    without. Its forward runs on the kernels, its BF16 weights pinned: --memory
                    holds them and its KV cache, the model plans with the rest (K3's lm_head
                    pinned first when the drafter reads it too). Not with --spec
  --spec-width N    with --drafter: verify exactly N proposals every sweep (default: a width
                    model chooses each sweep's, from the drafter's confidence and this run's costs)`;

/** --drafter and --spec-width, checked against --spec: the drafter's options for generate / session. */
export function drafterFromFlags(cmd: string, v: { drafter?: string; 'spec-width'?: string; spec?: string }): { drafter?: string; specWidth?: number } {
  if (v.drafter !== undefined && v.spec !== undefined) throw new UserError(`${cmd}: --drafter and --spec are exclusive`);
  if (v['spec-width'] !== undefined && v.drafter === undefined) throw new UserError(`${cmd}: --spec-width needs --drafter`);
  if (v.drafter === undefined) return {};
  return { drafter: v.drafter, ...(v['spec-width'] !== undefined ? { specWidth: parseIntFlag(cmd, 'spec-width', v['spec-width'], 0, 0) } : {}) };
}

export function samplingFromFlags(cmd: string, v: SamplingFlags): SamplingOptions {
  const int = (name: keyof SamplingFlags): number | undefined => (v[name] === undefined ? undefined : parseIntFlag(cmd, name, v[name], 0, 0));
  return {
    temperature: parseNumber(cmd, 'temperature', v.temperature),
    topK: int('top-k'),
    topP: parseNumber(cmd, 'top-p', v['top-p']),
    minP: parseNumber(cmd, 'min-p', v['min-p']),
    repetitionPenalty: parseNumber(cmd, 'repeat-penalty', v['repeat-penalty']),
    penaltyLastN: int('repeat-last-n'),
    presencePenalty: parseNumber(cmd, 'presence-penalty', v['presence-penalty']),
    frequencyPenalty: parseNumber(cmd, 'frequency-penalty', v['frequency-penalty']),
    seed: v.seed === '-1' ? randomSeed(cmd) : int('seed'),
  };
}

export const command: Command = {
  summary: 'generate text from a prompt (ids or text; greedy or sampled), with a run report',
  help: `usage: k3 run MODEL (--ids 1,2,3 | -p TEXT | -f FILE) [-n N] [--chat] [--json] [options]
       (-m MODEL works too, as in llama.cpp)

Prefills the prompt, then generates up to N tokens (default 16), greedily (argmax, first maximum
wins) unless --temperature > 0. Without --chat, generation is not stopped at EOS (use
--stop-at-eos). Text prompts need the tokenizer files (tiktoken.model, tokenizer_config.json) in
MODEL or in --tok DIR. Prints the generated text (or ids) as they come and a run report
(s/token, bytes read per token by kind, I/O wait share, peak RSS) on stderr; --json prints one
JSON object: {"prompt_ids", "generated_ids", "text", "stop_reason", "seconds_per_token", "steps", ...}
(stop_reason: stop_token, stop_string, max_tokens, context or interrupted); with --spec also
"spec": {sweeps, drafted, accepted, acceptance, tokens_per_sweep, acceptance_by_position}, and per step drafted, accepted,
emitted, gb_read_per_emitted_token, and (--spec, --drafter) drafted_ids and next_id (the id K3 chose
after the accepted drafts; null when the sweep stopped first). Generation stops when prompt + generated tokens reach --ctx
(stop_reason context); without --ctx the memory plan is made for prompt + N tokens when -n / --gen
is given. Ctrl-C stops at the next token and prints what was generated and the report (exit 130).
The report compares peak RSS with the budget: above it, one warning line on stderr and
"over_budget": true in --json (docs/MEMORY.md says what the plan counts).

  --strict-memory        exit 5 (after the output and report) when peak RSS ended above the budget
${DRAFTER_HELP}

  -p, --prompt TEXT      the prompt
  -f, --prompt-file F    the prompt from a file (- = stdin)
  --tok DIR         tokenizer directory (default: MODEL)
  -n, --max-tokens N  tokens to generate at most (alias: --gen; default 16)
  --chat            wrap the prompt as one user message in the model's chat format (K3's for K3
                    models, K2's otherwise) with the generation prompt; stops at end of message
  --system TEXT     with --chat: a system message first
  --no-thinking     with --chat, K3: open the response channel, not the think channel (default:
                    think, effort max, as K3's release template)
  --stop-at-eos     stop at the end-of-message / eos tokens without --chat
  --printable       print only readable text: special tokens, control characters and U+FFFD
                    (bytes of a broken UTF-8 sequence) left out (--json keeps the exact text)
${SAMPLING_HELP}
${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse(
      'run',
      args,
      { 'strict-memory': { type: 'boolean' }, ids: { type: 'string' }, prompt: { type: 'string', short: 'p' }, 'prompt-file': { type: 'string', short: 'f' }, tok: { type: 'string' }, gen: { type: 'string' }, json: { type: 'boolean' }, chat: { type: 'boolean' }, system: { type: 'string' }, 'stop-at-eos': { type: 'boolean' }, printable: { type: 'boolean' }, 'no-thinking': { type: 'boolean' }, ...DRAFTER_OPTIONS, ...SAMPLING_OPTIONS, ...MODEL_OPTIONS },
      1,
    );
    const dir = positionals[0]!;
    const given = [values.ids, values.prompt, values['prompt-file']].filter((v) => v !== undefined).length;
    if (given !== 1) throw new UserError('run: give exactly one of --ids, --prompt, --prompt-file');
    if (values.gen !== undefined && values['max-tokens'] !== undefined && values.gen !== values['max-tokens']) throw new UserError('run: --gen and --max-tokens disagree (they are the same option)');
    const gen = parseIntFlag('run', values['max-tokens'] !== undefined ? 'max-tokens' : 'gen', values['max-tokens'] ?? values.gen, 16, 1);
    const sampler = new Sampler(samplingFromFlags('run', values));
    const spec = parseIntFlag('run', 'spec', values.spec, 0, 0);
    const { drafter, specWidth } = drafterFromFlags('run', values);
    if (values.chat && values.ids) throw new UserError('run: --chat wraps a text prompt; give --prompt or --prompt-file');
    if (values.system !== undefined && !values.chat) throw new UserError('run: --system needs --chat');
    if (values['no-thinking'] && !values.chat) throw new UserError('run: --no-thinking needs --chat');
    checkModelDir('run', dir);
    const cfg0 = loadConfig(dir);
    const tokDir = values.tok ?? dir;
    const hasTok = fs.existsSync(path.join(tokDir, 'tiktoken.model'));
    const tok = hasTok ? checkTokenizerFits('run', await loadTokenizer(tokDir), tokDir, cfg0.vocabSize) : null;
    const stopStrings = values.stop ?? [];
    if (stopStrings.length > 0 && !tok) throw new UserError(`run: --stop needs the tokenizer files (tiktoken.model in ${tokDir}, or --tok DIR)`);
    let ids: number[];
    let text: string | undefined;
    if (values.ids) ids = parseIds('run', values.ids);
    else {
      if (!tok) throw new UserError(`run: text prompts need tiktoken.model in ${tokDir} (or --tok DIR)`);
      text = values.prompt ?? readTextFlag('run', 'prompt-file', values['prompt-file']!);
      if (values.chat) {
        const messages: ChatMessage[] = [...(values.system !== undefined ? [{ role: 'system', content: values.system }] : []), { role: 'user', content: text }];
        ids = renderChat(tok, messages, { format: cfg0.arch === 'k3' ? 'k3' : 'k2', addGenerationPrompt: true, thinking: !(values['no-thinking'] ?? false) }).ids;
      } else ids = tok.encode(text);
    }
    // The context: --ctx, else (when -n / --gen is given) exactly prompt + N, else 4096.
    const genGiven = values.gen !== undefined || values['max-tokens'] !== undefined;
    const ctx = values.ctx !== undefined ? parseIntFlag('run', 'ctx', values.ctx, 4096, 1) : genGiven ? ids.length + gen : 4096;
    if (ids.length >= ctx) throw new UserError(`run: the prompt is ${ids.length} tokens; --ctx ${ctx} leaves no room to generate (raise --ctx)`);
    const room = ctx - ids.length;
    const interrupt = stopOnSignals('run');
    let overBudget = false;
    const kimi = await loadForCommand('run', dir, { ...loadOptionsFromFlags('run', { ...values, ctx: String(ctx) }), tokenizer: values.tok, drafter }, tok);
    try {
      interrupt.throwIfAborted();
      const stopAtEos = (values.chat || values['stop-at-eos']) && !values['ignore-eos'];
      const show = values.printable && tok ? printable(tok) : (s: string) => s;
      let printed = 0;
      const g = kimi.generate(ids, { ...sampler.opts, maxTokens: Math.min(gen, room), stop: stopStrings, ignoreEos: !stopAtEos, spec, drafter, specWidth, report: true, signal: interrupt });
      for await (const ev of g) {
        if (values.json) continue;
        process.stdout.write(tok ? show(ev.text) : `${ev.id} `);
        printed += ev.text.length;
      }
      const r = await g.result;
      const reason = r.stopReason === 'aborted' ? 'interrupted' : r.stopReason === 'max_tokens' && room < gen && r.ids.length >= room ? 'context' : r.stopReason;
      const sum = r.report!;
      if (values.json) {
        console.log(JSON.stringify({ prompt_ids: ids, generated_ids: r.ids, ...(tok ? { text: r.text } : {}), stop_reason: reason, architecture: kimi.architecture, ctx, ...sum }));
      } else {
        process.stdout.write(show(r.text.slice(printed)) + '\n');
        if (reason === 'context') process.stderr.write(`[stopped: the context of ${ctx} tokens is full (prompt ${ids.length} + ${r.ids.length} generated); raise --ctx for more]\n`);
        if (reason === 'interrupted') process.stderr.write('[interrupted]\n');
        process.stderr.write(formatSummary(sum) + '\n');
      }
      const over = overBudgetWarning(sum);
      if (over) {
        process.stderr.write(`k3 run: ${over}\n`);
        if (values['strict-memory'] && !interrupt.aborted) overBudget = true;
      }
    } finally {
      await kimi.close();
    }
    return interrupt.aborted ? 130 : overBudget ? 5 : 0;
  },
};
