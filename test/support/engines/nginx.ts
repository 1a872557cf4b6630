import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { engineDir, requireProgram, spawnDaemon, waitFor, withFreshPorts, type Daemon } from './daemon.js';

/**
 * A real nginx (Debian's package) running the project's edge proxy, deploy/nginx.conf.template,
 * on a free loopback port in front of a service on loopback. The template is rendered as the image
 * renders it, then pointed at loopback: the resolver at 127.0.0.1, the upstream `api:3000` at the
 * service's address without `resolve` (an address has nothing to resolve, and Debian bookworm's
 * nginx, 1.22, predates `resolve` on a server), `listen 80` at the free port, access logs into the
 * engine's directory. Every other line runs as written.
 */

const HOST = '127.0.0.1';

export interface NginxOptions {
  /** The template to run (the project's by default). */
  template?: string;
  /** Where the service listens. */
  upstream: { host: string; port: number };
}

export interface Nginx {
  origin: string;
  /** The configuration nginx runs, as rendered. */
  config: string;
  /** What nginx wrote to its access log so far. */
  accessLog(): Promise<string>;
  /** What nginx printed (its error log), for failure messages. */
  output(): string;
  /** Stops it (SIGQUIT, SIGKILL after 2 s) and removes its directory. */
  close(): Promise<void>;
}

export const NGINX_TEMPLATE = new URL('../../../deploy/nginx.conf.template', import.meta.url);

/** The template's server block pointed at loopback (see above); throws when a line it rewrites is missing. */
export function renderForLoopback(template: string, upstream: { host: string; port: number }, port: number, accessLog: string) {
  const rewrites: Array<[RegExp, string]> = [
    [/\$\{NGINX_LOCAL_RESOLVERS\}/g, HOST],
    [/server api:3000 resolve /, `server ${upstream.host}:${upstream.port} `],
    [/set \$replicas api:3000;/, `set $replicas ${upstream.host}:${upstream.port};`],
    [/listen 80;/, `listen ${HOST}:${port};`],
  ];
  const rendered = rewrites.reduce((text, [pattern, replacement]) => {
    if (!pattern.test(text)) throw new Error(`the nginx template has no ${pattern}`);
    return text.replace(pattern, replacement);
  }, template);
  return rendered.replaceAll('/var/log/nginx/access.log', accessLog);
}

export async function startNginx(options: NginxOptions): Promise<Nginx> {
  const binary = requireProgram('nginx');
  const template = options.template ?? (await readFile(NGINX_TEMPLATE, 'utf8'));
  const dir = await engineDir('nginx');
  const accessLogFile = join(dir.path, 'access.log');
  let daemon: Daemon | undefined;
  let port = 0;
  let config = '';
  try {
    await withFreshPorts(1, async (ports) => {
      [port] = ports as [number];
      config = renderForLoopback(template, options.upstream, port, accessLogFile);
      await writeFile(join(dir.path, 'default.conf'), config);
      // The main file of the image, reduced: the template is included in the http block, as there.
      await writeFile(
        join(dir.path, 'nginx.conf'),
        [
          // Workers as the master's user: the temporary directories are the engine's.
          process.getuid?.() === 0 ? 'user root;' : '',
          'worker_processes 1;',
          `pid ${join(dir.path, 'nginx.pid')};`,
          'error_log stderr notice;',
          'events { worker_connections 256; }',
          'http {',
          ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((kind) => `  ${kind}_temp_path ${join(dir.path, kind)};`),
          `  access_log ${accessLogFile};`,
          `  include ${join(dir.path, 'default.conf')};`,
          '}',
          '',
        ].join('\n'),
      );
      const started = spawnDaemon(
        `nginx ${port}`,
        binary,
        ['-p', dir.path, '-c', join(dir.path, 'nginx.conf'), '-e', 'stderr', '-g', 'daemon off;'],
        {
          cwd: dir.path,
        },
      );
      daemon = started;
      try {
        await waitFor(`nginx ${port} answers`, async () => (await fetch(`http://${HOST}:${port}/`)).status > 0, { daemons: [started] });
      } catch (error) {
        await started.stop('SIGKILL');
        throw error;
      }
    });
  } catch (error) {
    await dir.remove();
    throw error;
  }
  const running = daemon!;
  return {
    origin: `http://${HOST}:${port}`,
    config,
    accessLog: () => readFile(accessLogFile, 'utf8').catch(() => ''),
    output: () => running.output(),
    async close() {
      await running.stop('SIGQUIT', 2_000);
      await dir.remove();
    },
  };
}
