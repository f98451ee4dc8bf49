import type { Command } from './main.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: '(not yet implemented)',
  help: 'k3 pack: not yet implemented',
  async run(): Promise<number> {
    throw new UserError('pack: not yet implemented');
  },
};
