// One progress line on a terminal: redrawn in place with \r (and \x1b[K to clear what the last
// draw left), at most once per interval and always when the job completes, ended with a newline
// if anything was drawn. When the stream is not a TTY it is silent, or prints a plain line per
// (longer) interval when asked to. `progressBar` is the bar `k3 pack` draws.

import { formatBytes, formatEta } from './format.js';

export interface ProgressLine {
  /** Report progress; draws when the interval has passed or done >= total. */
  update(done: number, total: number): void;
  /** Ends the line (a newline) if one was drawn on a TTY. */
  end(): void;
}

export interface ProgressLineOptions {
  /** Default process.stderr. */
  stream?: NodeJS.WriteStream;
  /** Least time between redraws on a TTY (default 200 ms). */
  intervalMs?: number;
  /** Not a TTY: print a plain line at most this often; undefined (default) = print nothing. */
  pipeIntervalMs?: number;
  /** The first update draws at once (default); false: not before one interval has passed since
   *  the process started (performance.now() = 0). */
  drawFirst?: boolean;
}

/** A progress line whose text is `render(done, total, seconds since it was made)`. The
 *  methods are bound: `onProgress: line.update` works. */
export function progressLine(render: (done: number, total: number, seconds: number) => string, opts: ProgressLineOptions = {}): ProgressLine {
  const stream = opts.stream ?? process.stderr;
  const tty = stream.isTTY === true;
  const interval = tty ? (opts.intervalMs ?? 200) : opts.pipeIntervalMs;
  const t0 = performance.now();
  let last = opts.drawFirst === false ? 0 : -Infinity;
  let shown = false;
  return {
    update(done, total) {
      if (interval === undefined) return;
      const now = performance.now();
      if (done < total && now - last < interval) return;
      last = now;
      const line = render(done, total, (now - t0) / 1000);
      stream.write(tty ? `\r${line}\x1b[K` : `${line}\n`);
      shown = true;
    },
    end() {
      if (shown && tty) stream.write('\n');
    },
  };
}

/** `label [#######.................]  30%  1.2 GiB / 4.0 GiB  310.0 MiB/s  ETA 9s`, redrawn at
 *  most every 200 ms; silent unless the stream is a TTY. */
export function progressBar(label: string, stream: NodeJS.WriteStream = process.stderr): ProgressLine {
  return progressLine(
    (done, total, s) => {
      const rate = done / Math.max(s, 1e-3);
      const frac = total > 0 ? done / total : 1;
      const width = 24;
      const fill = Math.round(frac * width);
      const eta = rate > 0 ? (total - done) / rate : Infinity;
      return `${label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${(100 * frac).toFixed(0).padStart(3)}%  ${formatBytes(done)} / ${formatBytes(total)}  ${formatBytes(rate)}/s  ETA ${formatEta(eta)}`;
    },
    { stream },
  );
}
