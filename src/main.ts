#!/usr/bin/env node
// `k3`, the binary: the command line (src/cli) handed the server (src/server) that `k3 serve`
// starts. The two faces import only the library (src/api) and src/util; they meet here.

import { runK3 } from './cli/main.js';
import { startServer } from './server/server.js';

runK3(process.argv.slice(2), { startServer });
