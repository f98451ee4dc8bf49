// kimi-k3-ts as a library: `import { loadModel } from 'kimi-k3-ts'` (package.json exports).

export { loadModel, KimiModel, Generation, type GenerateOptions, type ChatOptions, type ChatResult } from './model.js';
export type { LoadOptions } from './load.js';
export type { EngineStats } from './engine.js';
export type { GenerationResult, TokenEvent, TopLogprob } from './events.js';
export type { AssistantMessage } from './reply.js';
export { KimiChatSession, type SessionOptions, type TurnOptions, type TurnResult } from './session.js';
export type { RunSummary } from '../generate/report.js';
export type { ParsedToolCall } from './tool-calls.js';
export type { ChatMessage } from '../tokenizer/index.js';
export { UserError } from '../util/errors.js';
