// The vision side of a multimodal checkpoint (K3's and K2.5's vision tower and projector): a text
// engine never reads these tensors, so `k3 pull` leaves out the shards that hold nothing else, and
// a checkpoint directory may lack such shards although its index lists them.

const VISION = /(^|\.)(vision_tower|vision_model|mm_projector|multi_modal_projector|multi_modal)\./;

/** Whether a tensor name belongs to the vision tower or the multimodal projector. */
export function isVisionTensor(name: string): boolean {
  return VISION.test(name);
}

/** The shards of an index's weight_map whose every tensor is a vision tensor. */
export function visionOnlyShards(weightMap: Record<string, string>): Set<string> {
  const vision = new Set<string>();
  const text = new Set<string>();
  for (const [name, shard] of Object.entries(weightMap)) (isVisionTensor(name) ? vision : text).add(shard);
  for (const s of text) vision.delete(s);
  return vision;
}
