// Splitting a K3 reply into thinking and answer, as vLLM's `kimi_k3` reasoning parser returns
// them (`reasoning_content` apart from `content`). With thinking on, the generation prompt opens
// a `think` block (K3.md §9, tokenizer/chat.ts k3Segments); the model closes it with
// `<|close|>think<|sep|>` and opens the answer with `<|open|>response<|sep|>`. Everything before
// the close is reasoning, everything after the response opener is content; text is released as
// it comes, holding back only what may be the start of a marker.

const CLOSE_THINK = '<|close|>think<|sep|>';
const OPEN_RESPONSE = '<|open|>response<|sep|>';
const CLOSE_RESPONSE = '<|close|>response<|sep|>';

export interface Split {
  reasoning: string;
  content: string;
}

export class ReasoningSplitter {
  private phase: 'think' | 'opener' | 'content';
  private pending = '';

  /** @param thinking the reply starts inside a think block (false: everything is content). */
  constructor(thinking: boolean) {
    this.phase = thinking ? 'think' : 'content';
  }

  push(text: string, final = false): Split {
    this.pending += text;
    const out: Split = { reasoning: '', content: '' };
    for (;;) {
      const p = this.pending;
      if (this.phase === 'think') {
        const i = p.indexOf(CLOSE_THINK);
        if (i >= 0) {
          out.reasoning += p.slice(0, i);
          this.pending = p.slice(i + CLOSE_THINK.length);
          this.phase = 'opener';
          continue;
        }
        const hold = final ? 0 : heldPrefix(p, CLOSE_THINK);
        out.reasoning += p.slice(0, p.length - hold);
        this.pending = p.slice(p.length - hold);
        return out;
      }
      if (this.phase === 'opener') {
        if (p.startsWith(OPEN_RESPONSE)) this.pending = p.slice(OPEN_RESPONSE.length);
        else if (!final && OPEN_RESPONSE.startsWith(p)) return out;
        this.phase = 'content';
        continue;
      }
      // content: the response block's close tag is markup, not answer
      const i = p.indexOf(CLOSE_RESPONSE);
      if (i >= 0) {
        out.content += p.slice(0, i);
        this.pending = '';
        return out;
      }
      const hold = final ? 0 : heldPrefix(p, CLOSE_RESPONSE);
      out.content += p.slice(0, p.length - hold);
      this.pending = p.slice(p.length - hold);
      return out;
    }
  }
}

/** Length of the longest suffix of `p` that is a proper prefix of `marker`. */
export function heldPrefix(p: string, marker: string): number {
  for (let k = Math.min(marker.length - 1, p.length); k > 0; k--) if (p.endsWith(marker.slice(0, k))) return k;
  return 0;
}
