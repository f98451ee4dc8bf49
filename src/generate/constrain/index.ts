// Constrained decoding for K3 replies: JSON Schema held byte by byte, tool calls held to their
// tools' schemas, and a reply that always ends within its token budget.

export { k3ReplyConstraint, k3GrammarOptions, vocabIndex, FREE_SHARE, type K3ReplyOptions, type K3Constraint, type ResponseFormat, type ToolChoice } from './k3.js';
export { GrammarConstraint, type TokenConstraint, type FreeShares } from './constraint.js';
export { sampleConstrained } from './sample.js';
export { TokenGrammar, NEVER } from './masks.js';
export { Matcher, DEAD } from './matcher.js';
export { replyGrammar, escAttr, type ReplyGrammarOptions, type ToolSpec } from './xtml.js';
export { SchemaCompiler } from './schema.js';
export { JsonCtx } from './json.js';
export { WsG } from './json-lexical.js';
export { VocabIndex } from './vocab.js';
export * as symbols from './symbols.js';
