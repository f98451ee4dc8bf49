import type { Command } from './main.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: '(not yet implemented)',
  help: 'k3 bench: not yet implemented',
  async run(): Promise<number> {
    throw new UserError('bench: not yet implemented');
  },
};
