// Server-sent events as OpenAI streams them: `data: {json}` per chunk, `data: [DONE]` at the end.

import type { ServerResponse } from 'node:http';

export class EventStream {
  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
  }

  send(chunk: unknown): void {
    if (!this.res.writableEnded && !this.res.destroyed) this.res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }

  done(): void {
    if (this.res.writableEnded || this.res.destroyed) return;
    this.res.write('data: [DONE]\n\n');
    this.res.end();
  }
}
