// What the HTTP server (src/server) is started with, named in the library so that the command
// line (src/cli), which starts it, and the server itself both import it from here: the two faces
// meet only in the binary (src/main.ts).

import type { DrafterChoice } from './drafter.js';
import type { KimiModel } from './model.js';

/** Sampling values used where a request sends none (the model's generation_config.json). */
export interface SamplingDefaults {
  temperature?: number;
  top_p?: number;
}

/** The model's settings every route of the server applies. */
export interface ServedOptions {
  /** Name in /v1/models and responses (default: the model directory's name). */
  name: string;
  /** Most tokens one request may generate. */
  maxContext: number;
  /** Sampling values for requests that send none (generation_config.json). */
  defaults?: SamplingDefaults;
  /** The hosted K3 API's fixed sampling parameters, rejecting what it rejects (`--vendor-params`). */
  vendorParams?: boolean;
  /** K3: think when a request does not say (default true; `--no-thinking`). */
  thinking?: boolean;
  /** Most tokens of a chat reply whose request sends no max_tokens (`--max-tokens`; default: the context). */
  defaultMaxTokens?: number;
  /** `--drafter DIR [--spec-width N]`, checked at start with checkDrafter: every generation drafts with it, but replies held to a structure. */
  drafter?: DrafterChoice;
}

/** What `k3 serve` is started with: the model's settings and the HTTP side. */
export interface ServeOptions extends ServedOptions {
  host?: string;
  port?: number;
  /** Required as `Authorization: Bearer KEY` on /v1/ routes and /metrics when set (not empty). */
  apiKey?: string;
  /** /metrics answers without the key (`--metrics-open`). */
  metricsOpen?: boolean;
  /** Largest request body in bytes (default 4 MiB). */
  bodyLimit?: number;
  /** Requests waiting beyond the running ones before 429 (default 64). */
  maxQueue?: number;
}

/** A listening server: its address, and a stop that lets running requests end. */
export interface ServerHandle {
  url: string;
  close(): Promise<void>;
}

/** src/server's startServer, as the command line is handed it. */
export type StartServer = (kimi: KimiModel, o: ServeOptions) => Promise<ServerHandle>;
