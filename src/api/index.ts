// kimi-k3-ts as a library: `import { loadModel } from 'kimi-k3-ts'` (package.json exports).

export { loadModel, KimiModel, Generation, type GenerateOptions, type ChatOptions, type RenderedPrompt } from './model.js';
export { declaredTools } from './chat.js';
export type { AssistantMessage, ChatDelta, ChatResult, ChatTokenEvent, ChatTurnOptions, ResponseFormat, ToolChoice, ToolSpec } from './chat.js';
export type { LoadOptions } from './load.js';
export type { EngineStats } from './engine.js';
export type { GenerationResult, TokenEvent, TopLogprob } from './events.js';
export { checkDrafter, type DrafterChoice } from './drafter.js';
export { specStats, type SpecStats } from './spec-stats.js';
export { KimiChatSession, type SessionOptions, type TurnOptions, type TurnResult } from './session.js';
export type { RunSummary } from '../generate/report.js';
export type { ParsedToolCall } from './tool-calls.js';
export { K3ReplyParser, parseK3Reply, type K3Delta, type K3Parsed, type K3State, type K3ToolCall } from './k3-reply.js';
export type { ChatMessage } from '../tokenizer/index.js';
export { samplingDefaults } from './generation-config.js';
export type { SamplingDefaults, ServedOptions, ServeOptions, ServerHandle, StartServer } from './serve-options.js';
export { UserError } from '../util/errors.js';
