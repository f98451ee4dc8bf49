// Server-sent events as OpenAI streams them: `data: {json}` per chunk, `data: [DONE]` at the end;
// Anthropic's name each event (`event: type`) and just end.

import type { IncomingMessage, ServerResponse } from 'node:http';

export class EventStream {
  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
  }

  send(chunk: unknown, event?: string): void {
    if (!this.res.writableEnded && !this.res.destroyed) this.res.write(`${event !== undefined ? `event: ${event}\n` : ''}data: ${JSON.stringify(chunk)}\n\n`);
  }

  end(): void {
    if (!this.res.writableEnded && !this.res.destroyed) this.res.end();
  }

  done(): void {
    if (this.res.writableEnded || this.res.destroyed) return;
    this.res.write('data: [DONE]\n\n');
    this.res.end();
  }
}

/** An AbortSignal that fires when the client goes away before the reply is complete. */
export function clientGone(req: IncomingMessage, res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) ac.abort();
  });
  req.on('aborted', () => ac.abort());
  return ac.signal;
}
