// What every route of the server is handed: the loaded model with its settings (the name it is
// served as, the context the server was planned for, the sampling rules it applies).

import type { KimiModel, ServedOptions } from '../api/index.js';

export interface Served extends ServedOptions {
  kimi: KimiModel;
}
