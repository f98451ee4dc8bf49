// The message and segment types both chat renderers share (chat.ts, k3-chat.ts).

export interface ContentPart {
  type: string;
  text?: string;
  [k: string]: unknown;
}

export interface ToolCall {
  id: string;
  type?: string;
  function: { name: string; arguments: string | Record<string, unknown> };
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  content?: string | ContentPart[] | null;
  /** K2: shown instead of the role; K3: a `name` attribute when non-empty. */
  name?: string;
  /** For role "tool" (K2: "## Return of {id}"; K3: matched against the calls' ids). */
  tool_call_id?: string;
  /** Assistant tool calls. */
  tool_calls?: ToolCall[];
  /** Assistant reasoning (K3: the `think` channel). */
  reasoning_content?: string | null;
}

export interface ChatSegment {
  text: string;
  /** A control token (one special id) rather than ordinary text. */
  special: boolean;
}
