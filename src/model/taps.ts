// Taps (issue 46, item 2): the hidden states of K3 after some layers, handed out by the forward
// pass for every position it computes, for a DSpark drafter to read (docs/DSPARK.md §3). A tap is
// a copy of a state the forward computes anyway (or, for the `attn_res` stream, the mixture the
// next layer computes from states already there): no weight is read for it.

/** What a forward call should hand out, and where to. */
export interface Taps {
  /** 0-based target layers whose output is tapped, ascending. */
  readonly layers: readonly number[];
  /** `prefix`: the running AttnRes sum after the layer; `attn_res`: the mixture the next layer's
   *  attention reads (before its norm), the output mixture after the last layer. */
  readonly stream: 'prefix' | 'attn_res';
  /**
   * Called once per forward chunk with the states of positions `pos` .. `pos + T - 1`: one [T, D]
   * array per tapped layer, in `layers` order; the arrays are the receiver's to keep.
   */
  take(pos: number, T: number, states: Float32Array[]): void;
}

/** Refuse a tap request the target cannot serve (layers out of range or unordered). */
export function checkTaps(taps: Taps, numLayers: number): void {
  const ls = taps.layers;
  ls.forEach((l, i) => {
    if (!Number.isInteger(l) || l < 0 || l >= numLayers) throw new Error(`taps: layer ${l} is not one of the target's ${numLayers} layers`);
    if (i > 0 && l <= ls[i - 1]!) throw new Error(`taps: layers ${ls.join(', ')} are not ascending and distinct`);
  });
}
