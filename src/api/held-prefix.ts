// Streaming text past a marker (a stop string, a tag): the tail that may be the marker's start
// is held back until the next piece settles it.

/** Length of the longest suffix of `p` that is a proper prefix of `marker`. */
export function heldPrefix(p: string, marker: string): number {
  for (let k = Math.min(marker.length - 1, p.length); k > 0; k--) if (p.endsWith(marker.slice(0, k))) return k;
  return 0;
}
