// `k3 render DIR --request FILE [--json | --jsonl]`: the body of a /v1/chat/completions request
// to K3's prompt exactly as Moonshot's release renderer writes it (segments, text, ids).

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Command } from './command.js';
import { parse } from './args.js';
import { UserError } from '../util/errors.js';
import { encodeK3Segments, k3ChatSegments, k3PromptTokenCount, K3RenderError, k3RequestFromBody, loadTokenizer, PyJsonError, pyLoads, type ChatSegment, type Tokenizer } from '../api/tokens.js';

export const command: Command = {
  summary: 'a K3 chat request to its prompt (segments and ids)',
  help: `usage: k3 render DIR --request FILE [--json | --jsonl]

Renders the body of a /v1/chat/completions request (messages, tools, tool_choice,
response_format; thinking and thinking_effort top-level or under chat_template_kwargs,
reasoning_effort as an alias, "none" = thinking off; add_generation_prompt) to the K3 prompt
as Moonshot's release renderer does, with the tokenizer in DIR (tiktoken.model +
tokenizer_config.json). Defaults as the served entry point: thinking on, effort max.

  --request FILE  the request JSON (- = stdin); numbers and key order are kept as Python
                  reads them
  --json          print {"segments": [{"text", "special"}...], "text", "ids", "prompt_tokens"}
  --jsonl         FILE holds one request per line; print one --json object per line, or
                  {"error": CODE, "message": ...} for a request the renderer refuses

prompt_tokens is Moonshot's usage.prompt_tokens: the ids less the 3-token generation prefix.
A refused request prints one line naming the field and exits 1.`,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse('render', args, { request: { type: 'string' }, json: { type: 'boolean' }, jsonl: { type: 'boolean' } }, 1);
    if (positionals.length !== 1) throw new UserError(`render: expected one model directory, got ${positionals.length} arguments (k3 render --help)`);
    const file = values.request;
    if (file === undefined) throw new UserError('render: --request FILE is required (k3 render --help)');
    let text: string;
    try {
      text = file === '-' ? readFileSync(0, 'utf8') : await readFile(file, 'utf8');
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new UserError(`render: cannot read --request ${file}: ${code === 'ENOENT' ? 'no such file' : (e as Error).message}`, code === 'ENOENT' ? 2 : 1);
    }
    const tok = await loadTokenizer(positionals[0]!);
    if (tok.specialId('<|open|>') === undefined) throw new UserError(`render: ${positionals[0]} is not a K3 tokenizer (no <|open|> token)`);
    if (!values.jsonl) {
      const r = renderOne(tok, parseRequest(text, file), (e) => {
        throw new UserError(`render: ${e.message}`, 1);
      });
      process.stdout.write(values.json ? `${JSON.stringify(r)}\n` : human(r!));
      return 0;
    }
    let failed = false;
    const lines = text.split('\n');
    const out: string[] = [];
    lines.forEach((line, i) => {
      if (line.trim() === '') return;
      const r = renderOne(tok, parseRequest(line, `${file}:${i + 1}`), (e) => {
        failed = true;
        out.push(JSON.stringify({ error: e.code, message: e.message }));
      });
      if (r) out.push(JSON.stringify(r));
    });
    process.stdout.write(out.map((l) => `${l}\n`).join(''));
    return failed ? 1 : 0;
  },
};

interface Rendered {
  segments: ChatSegment[];
  text: string;
  ids: number[];
  prompt_tokens: number;
}

function parseRequest(text: string, where: string): unknown {
  try {
    return pyLoads(text);
  } catch (e) {
    if (e instanceof PyJsonError) throw new UserError(`render: ${where}: not valid JSON (${e.message})`, 1);
    throw e;
  }
}

function renderOne(tok: Tokenizer, body: unknown, refused: (e: K3RenderError) => void): Rendered | undefined {
  try {
    const segments = k3ChatSegments(k3RequestFromBody(body));
    const ids = encodeK3Segments(tok, segments);
    return { segments, text: segments.map((s) => s.text).join(''), ids, prompt_tokens: k3PromptTokenCount(ids) };
  } catch (e) {
    if (!(e instanceof K3RenderError)) throw e;
    refused(e);
    return undefined;
  }
}

/** One message a line: control tokens bare, text segments JSON-quoted (boundaries visible). */
function human(r: Rendered): string {
  let s = '';
  let line: string[] = [];
  for (const seg of r.segments) {
    line.push(seg.special ? seg.text : JSON.stringify(seg.text));
    if (seg.special && seg.text === '<|end_of_msg|>') {
      s += `${line.join(' ')}\n`;
      line = [];
    }
  }
  if (line.length > 0) s += `${line.join(' ')}\n`;
  return `${s}${r.ids.length} ids, ${r.segments.length} segments, prompt_tokens ${r.prompt_tokens}\n`;
}
