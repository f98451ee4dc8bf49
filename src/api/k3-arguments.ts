// K3 tool-call arguments (docs/spec/K3-CHAT.md §3.5, §7): each `argument` block holds its value as raw
// text plus a `type`; a string is the text itself, any other type is strict JSON (falling back
// to the text). The OpenAI `arguments` string is spliced from the model's own JSON text, since
// JSON.stringify(JSON.parse(x)) would respell numbers (1.0 -> 1) and move integer-like keys first.

/** One argument's value: its JSON text for `arguments`, and the parsed value. */
interface ArgValue {
  json: string;
  value: unknown;
}

export function argumentValue(raw: string, type: string): ArgValue {
  if (type !== 'string') {
    try {
      return { value: JSON.parse(raw) as unknown, json: compactJson(raw) };
    } catch {
      // not JSON (NaN, True, prose): the text stays a string
    }
  }
  return { json: JSON.stringify(raw), value: raw };
}

/** Valid JSON text with the whitespace outside strings removed (numbers and keys as written). */
export function compactJson(text: string): string {
  let out = '';
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) {
      out += text.slice(from, i);
      from = i + 1;
    }
  }
  return out + text.slice(from);
}

/** The arguments of one call as they arrive: argument blocks (a repeated key keeps its first
 *  place and takes the last value, as a Python dict does) or one `json` block's raw text. */
export class CallArguments {
  private readonly args = new Map<string, ArgValue>();
  private raw: string | null = null;

  add(key: string, text: string, type: string): void {
    this.args.set(key, argumentValue(text, type));
  }

  /** A `json` block: its text is the arguments string verbatim, valid JSON or not. */
  setRaw(text: string): void {
    this.raw = text;
  }

  /** The OpenAI `arguments` string. */
  text(): string {
    if (this.raw !== null) return this.raw;
    return `{${[...this.args].map(([k, v]) => `${JSON.stringify(k)}:${v.json}`).join(',')}}`;
  }

  /** The arguments completed so far, parsed (a truncated call's `arguments_partial`). */
  partial(): Record<string, unknown> {
    if (this.raw !== null) {
      try {
        const v = JSON.parse(this.raw) as unknown;
        if (v !== null && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
      } catch {
        // an unparseable json block has no arguments to show
      }
      return {};
    }
    // fromEntries defines own properties, so a key such as "__proto__" stays a plain key
    return Object.fromEntries([...this.args].map(([k, v]) => [k, v.value]));
  }
}
