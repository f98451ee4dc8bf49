// Byte sizes and durations as the CLI and the benches print them. One copy of each rule, so the
// same size reads the same in `k3 plan`, `k3 pack`, `k3 synth` and the benches.

export const KiB = 2 ** 10;
export const MiB = 2 ** 20;
export const GiB = 2 ** 30;

/** Binary units: "1.50 GiB", "12.3 MiB", below 1 MiB "0.5 KiB" (never bytes). */
export function formatBytes(n: number): string {
  if (n >= GiB) return `${(n / GiB).toFixed(2)} GiB`;
  if (n >= MiB) return `${(n / MiB).toFixed(1)} MiB`;
  return `${(n / KiB).toFixed(1)} KiB`;
}

/** Whole MiB: "512 MiB". */
export function formatMiB(n: number): string {
  return `${(n / MiB).toFixed(0)} MiB`;
}

/** Decimal units, auto-scaled: "1.23 GB", "4.56 MB", "7.8 kB". */
export function formatDecimalBytes(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : `${(n / 1e3).toFixed(1)} kB`;
}

/** Decimal gigabytes, two decimals: "1.56 GB". */
export function formatGB(n: number): string {
  return `${(n / 1e9).toFixed(2)} GB`;
}

/** A duration in seconds as an ETA: "1h02m", "3m05s", "12s"; "?" when not finite. */
export function formatEta(s: number): string {
  if (!Number.isFinite(s)) return '?';
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, '0')}s`;
  return `${s.toFixed(0)}s`;
}
