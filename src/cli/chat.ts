import type { Command } from './main.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: '(not yet implemented)',
  help: 'k3 chat: not yet implemented',
  async run(): Promise<number> {
    throw new UserError('chat: not yet implemented');
  },
};
