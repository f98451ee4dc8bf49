// The decoding pieces the CLI drives itself: the sampler and run summary of `k3 run` / `k3 chat`,
// and greedy and speculative decoding of `k3 demo`'s sums check. Named here so the CLI imports
// the library only (see eslint.config.js).

export { SuffixDrafter } from '../generate/suffix-draft.js';
export { greedy } from '../generate/greedy.js';
export { formatSummary, overBudgetWarning, type RunRecorder } from '../generate/report.js';
export { Sampler, type SamplingOptions } from '../generate/sampling.js';
export { speculative } from '../generate/spec.js';
