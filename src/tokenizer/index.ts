// The Kimi tokenizer and chat formats: one import for the rest of the engine.

export {
  Tokenizer,
  StreamDecoder,
  loadTokenizer,
  parseTiktokenModel,
  MODEL_FILE,
  CONFIG_FILE,
  TEMPLATE_FILE,
  type TokenizerFamily,
  type TokenizerOptions,
  type EncodeOptions,
} from './tokenizer.js';
export {
  renderChat,
  pyJson,
  renderK2Fallback,
  stopTokenIds,
  deepSortKeys,
  K2_DEFAULT_SYSTEM,
  type ChatMessage,
  type ChatOptions,
  type ChatSegment,
  type ContentPart,
  type RenderedChat,
  type ToolCall,
} from './chat.js';
export { KIMI_PATTERN_SOURCE, splitPieces, referenceChunks } from './pretokenize.js';
export { checkTokenizerFits } from './fits.js';
export { demoTokenizerFiles, demoTokenizerFilesFor, DEMO_VOCAB_SIZE, DEMO_SPECIALS } from './demo.js';
export {
  k3ChatSegments,
  encodeK3Segments,
  k3PromptTokenCount,
  pyStrip,
  K3RenderError,
  K3_GENERATION_PREFIX_TOKENS,
  K3_THINKING_EFFORTS,
  type K3ChatRequest,
  type K3Message,
  type K3ToolCall,
} from './k3-chat.js';
export { k3RequestFromBody } from './k3-request.js';
export { pyDumps, pyLoads, pyFloatRepr, pyString, deepSort, compareCodePoints, dictEntries, PyDict, PyNum, PyJsonError, type DumpOptions } from './pyjson.js';
