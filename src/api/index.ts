// kimi-k3-ts as a library: `import { loadModel } from 'kimi-k3-ts'` (package.json exports).

export { loadModel, KimiModel, Generation, type GenerateOptions, type ChatOptions, type ChatResult } from './model.js';
export type { LoadOptions } from './load.js';
export type { GenerationResult, TokenEvent, TopLogprob, EngineStats } from './engine.js';
export type { AssistantMessage } from './reply.js';
export type { ParsedToolCall } from './tool-calls.js';
export type { ChatMessage } from '../tokenizer/index.js';
export { UserError } from '../util/errors.js';
