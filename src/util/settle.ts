// Reads that fill parts of one buffer: when one fails, the others may still be writing into it.
// Promise.all would hand the buffer back (to be reused for other bytes) while they do, so a
// failure is reported only once every read has settled.

/** Wait for every promise (nulls are skipped); then throw the first rejection, if any. */
export async function allSettledOrThrow(ps: Iterable<Promise<unknown> | null>): Promise<void> {
  const rs = await Promise.allSettled([...ps].filter((p): p is Promise<unknown> => p !== null));
  for (const r of rs) if (r.status === 'rejected') throw r.reason;
}
