// What a speed figure was measured on: benches print it next to their numbers, since ratios carry
// from machine to machine and absolute times do not.

import * as os from 'node:os';

export interface MachineInfo {
  cpu: string;
  logical_cpus: number;
  node: string;
  os: string;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return { cpu: cpus[0]?.model.trim() || 'unknown CPU', logical_cpus: cpus.length, node: process.version, os: `${os.platform()} ${os.release()}` };
}

/** One line: `Intel(R) Xeon(R) Processor, 2 logical CPUs, Node v20.20.2, linux 6.18.0`. */
export function machineLine(m: MachineInfo = machineInfo()): string {
  return `${m.cpu}, ${m.logical_cpus} logical CPU${m.logical_cpus === 1 ? '' : 's'}, Node ${m.node}, ${m.os}`;
}
