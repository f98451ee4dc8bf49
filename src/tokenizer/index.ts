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
  k3Segments,
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
export { demoTokenizerFiles, DEMO_VOCAB_SIZE, DEMO_SPECIALS } from './demo.js';
