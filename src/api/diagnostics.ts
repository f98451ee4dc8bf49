// What the diagnostic commands (`k3 info`, `k3 plan`, `k3 bench`) read below the library's
// model: the checkpoint's census, the store's layout and memory plan, the kernels' profile. Named
// here so the faces (src/cli, src/server) import the library only (see eslint.config.js).

export { census, layerMap } from '../checkpoint/census.js';
export { loadConfig, type ModelConfig } from '../checkpoint/config.js';
export { checkTensorsMatchConfig } from '../checkpoint/expect.js';
export type { TensorEntry } from '../checkpoint/safetensors.js';
export { assumedExperts, configAndIndex } from '../checkpoint/virtual.js';
export type { WeightFormat } from '../formats/weight.js';
export { KernelProfile, PROFILE_BUCKETS, maddHint, type ProfileBucket } from '../graph/compute.js';
export { Model } from '../model/model.js';
export { stateSize } from '../model/state.js';
export { knownRanges } from '../store/checksums.js';
export { directSupported } from '../store/direct-reader.js';
export { buildLayout } from '../store/layout.js';
export { WORKER_BYTES, makePlan, maxBudget, planItems, resolveBudget } from '../store/plan.js';
export { checkDrafterTarget, loadDrafter, type Drafter } from '../checkpoint/drafter.js';
export { makeDrafterPlan, type DrafterPlan } from '../store/drafter-plan.js';
export { draftBlock, projectContext, type DraftInput, type DraftOutput, type DraftWeights } from '../model/dspark-ref.js';
