// Making and checking checkpoint directories (`k3 pack`, `k3 verify`, `k3 pull`, `k3 synth`,
// `k3 demo`): the packer, the checksum records and the synthetic checkpoints of the tests, named
// here so the CLI imports the library only (see eslint.config.js).

export { indexCheckpointDir } from '../checkpoint/dir.js';
export { isPackedDir } from '../checkpoint/packed.js';
export { CHECKSUMS_NAME, recordOrCheck } from '../store/checksums.js';
export { DEFAULT_FILE_SIZE, DEFAULT_MAX_RECORD, packCheckpoint, verifyPack, type ExpertsMode } from '../store/pack.js';
export { parseSize } from '../store/plan.js';
export { ARCHS, EXPERTS_FORMATS, PRESETS, type ExpertsFormat, type SynthArch, type SynthPreset } from '../synth/dims.js';
export { synthCheckpoint, type SynthOptions } from '../synth/synth.js';
export { demoTokenizerFiles } from '../tokenizer/index.js';
export { DRAFTER_LAYOUTS, synthDrafter, type DrafterDims, type DrafterLayout, type SynthDrafterOptions } from '../synth/drafter.js';
