import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The parts of V8's .cpuprofile (what `node --cpu-prof` writes) that are read here. */
export interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }>;
  /** The node on top of the stack at each sample. */
  samples: number[];
  /** Microseconds since the previous sample, one per sample. */
  timeDeltas: number[];
  /** Microseconds on the monotonic clock that process.hrtime() reads too. */
  startTime: number;
}

/** A span on the monotonic clock, in microseconds: process.hrtime.bigint() / 1000n. */
export interface Window {
  fromUs: number;
  toUs: number;
}

export const monotonicMicroseconds = () => Number(process.hrtime.bigint() / 1000n);

export interface Share {
  name: string;
  ms: number;
  /** Of the time the process was busy (not idle). */
  percent: number;
}

export interface ProfileSummary {
  busyMs: number;
  idleMs: number;
  /** Time with the function itself on top of the stack. */
  selfByFunction: Share[];
  /** The same, by package, Node.js subsystem or service file. */
  selfByArea: Share[];
  /** Time with the area anywhere on the stack: what each costs with everything it calls. */
  inclusiveByArea: Share[];
}

/** Frames that are not JavaScript functions: V8's own bookkeeping. */
const IDLE = '(idle)';

/** node_modules/<package> (scoped too), node:<subsystem>, the service's own file, or V8's pseudo-frames. */
function areaOf(url: string, functionName: string, root: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (dependency) return dependency[1]!;
  if (url.startsWith('node:')) return `node:${url.replace(/^node:(internal\/)?/, '').split('/')[0]}`;
  return shortUrl(url, root);
}

function shortUrl(url: string, root: string): string {
  const path = url.startsWith('file://') ? fileURLToPath(url) : url;
  const dependency = path.indexOf('node_modules/');
  if (dependency >= 0) return path.slice(dependency + 'node_modules/'.length);
  return path.startsWith(root) ? relative(root, path) : path;
}

function ranked(times: Map<string, number>, busyMs: number): Share[] {
  return [...times].map(([name, ms]) => ({ name, ms, percent: (100 * ms) / busyMs })).sort((a, b) => b.ms - a.ms);
}

const add = (times: Map<string, number>, name: string, ms: number) => times.set(name, (times.get(name) ?? 0) + ms);

/**
 * Aggregates the samples taken within the window (leaving out start-up and shutdown) by function
 * and by area; root is the repository, for short file names.
 */
export function summarizeProfile(profile: CpuProfile, root: string, window: Window): ProfileSummary {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const parents = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);

  const selfByFunction = new Map<string, number>();
  const selfByArea = new Map<string, number>();
  const inclusiveByArea = new Map<string, number>();
  let idleMs = 0;
  let busyMs = 0;
  let sampledAtUs = profile.startTime;
  profile.samples.forEach((id, index) => {
    const deltaUs = profile.timeDeltas[index] ?? 0;
    sampledAtUs += deltaUs;
    if (sampledAtUs < window.fromUs || sampledAtUs > window.toUs) return;
    const ms = deltaUs / 1000;
    const { functionName, url, lineNumber } = nodes.get(id)!.callFrame;
    if (functionName === IDLE) {
      idleMs += ms;
      return;
    }
    busyMs += ms;
    const where = url ? ` ${shortUrl(url, root)}:${lineNumber + 1}` : '';
    add(selfByFunction, `${functionName || '(anonymous)'}${where}`, ms);
    add(selfByArea, areaOf(url, functionName, root), ms);
    // Each area once per sample, however deep it recurses.
    const onStack = new Set<string>();
    for (let frame: number | undefined = id; frame !== undefined; frame = parents.get(frame)) {
      const { callFrame } = nodes.get(frame)!;
      if (callFrame.functionName !== '(root)') onStack.add(areaOf(callFrame.url, callFrame.functionName, root));
    }
    for (const area of onStack) add(inclusiveByArea, area, ms);
  });
  return {
    busyMs,
    idleMs,
    selfByFunction: ranked(selfByFunction, busyMs),
    selfByArea: ranked(selfByArea, busyMs),
    inclusiveByArea: ranked(inclusiveByArea, busyMs),
  };
}

const shareTable = (title: string, shares: Share[], limit: number) =>
  [
    `| ${title} | ms | % of busy |`,
    '| --- | --- | --- |',
    ...shares.slice(0, limit).map((share) => `| \`${share.name}\` | ${share.ms.toFixed(0)} | ${share.percent.toFixed(1)} |`),
  ].join('\n');

export function renderProfile(summary: ProfileSummary, heading: string): string {
  const total = summary.busyMs + summary.idleMs;
  return [
    heading,
    '',
    `Sampled ${(total / 1000).toFixed(1)} s of the measured load: busy ${(summary.busyMs / 1000).toFixed(1)} s (${((100 * summary.busyMs) / total).toFixed(0)}%), ` +
      `idle (waiting for I/O) ${(summary.idleMs / 1000).toFixed(1)} s. Percentages are of the busy time of the server's main thread.`,
    '',
    '### Self time by function',
    '',
    shareTable('Function', summary.selfByFunction, 30),
    '',
    '### Self time by area',
    '',
    shareTable('Area', summary.selfByArea, 20),
    '',
    '### Inclusive time by area (the area anywhere on the stack)',
    '',
    shareTable('Area', summary.inclusiveByArea, 25),
    '',
  ].join('\n');
}
