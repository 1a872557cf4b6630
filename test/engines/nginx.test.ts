import { readFileSync } from 'node:fs';
import { describe, expect, test as base } from 'vitest';
import { describeNeeding, NEEDS, NGINX_TEMPLATE, startNginx } from '../support/engines/index.js';
import { appTest } from '../support/fixtures.js';

// The edge proxy the project ships (deploy/nginx.conf.template): its configuration read as nginx
// reads it, then a real nginx running it in front of the service. .ci/compose-check.sh runs it in
// the compose setup as well.

interface Directive {
  name: string;
  args: string[];
  block?: Directive[];
}

/** nginx's configuration syntax: directives, their arguments (quotes removed) and blocks; comments dropped. */
function parseNginx(text: string): Directive[] {
  const tokens = text.match(/#[^\n]*|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[{};]|(?:\$\{[^}]*\}|[^\s{};'"#])+/g) ?? [];
  const root: Directive[] = [];
  const open: Directive[][] = [root];
  let words: string[] = [];
  for (const token of tokens) {
    if (token.startsWith('#')) continue;
    const current = open.at(-1)!;
    if (token === ';' || token === '{') {
      const [name, ...args] = words;
      const directive: Directive = { name: name!, args };
      current.push(directive);
      if (token === '{') open.push((directive.block = []));
      words = [];
    } else if (token === '}') {
      open.pop();
    } else {
      words.push(/^['"]/.test(token) ? token.slice(1, -1) : token);
    }
  }
  return root;
}

const named = (block: Directive[], name: string) => block.filter((directive) => directive.name === name);

/** An array directive as a location sees it: its own when it has any, else its server's (nginx's inheritance). */
const effective = (server: Directive[], location: Directive[], name: string) =>
  (named(location, name).length > 0 ? named(location, name) : named(server, name)).map((directive) => directive.args.join(' '));

const template = readFileSync(NGINX_TEMPLATE, 'utf8');
const server = named(parseNginx(template), 'server')[0]!.block!;
const locations = named(server, 'location');

const HEALTH_PATHS = ['/healthz', '/readyz'];
const NGINX_ID = /^[0-9a-f]{32}$/;

describe('deploy/nginx.conf.template', () => {
  base('every location that proxies sends nginx’s own $request_id as X-Request-Id, and answers with it', () => {
    const proxying = locations.filter((location) => named(location.block!, 'proxy_pass').length > 0);
    expect(proxying.map((location) => location.args.join(' '))).toEqual(['/', '@again', '@keyless']);
    for (const location of proxying) {
      const where = location.args.join(' ');
      expect(effective(server, location.block!, 'proxy_set_header'), where).toContain('X-Request-Id $request_id');
      expect(effective(server, location.block!, 'proxy_hide_header'), where).toContain('X-Request-Id');
      expect(effective(server, location.block!, 'add_header'), where).toContain('X-Request-Id $request_id always');
    }
  });

  base('announces no version, and answers health and readiness itself, as unknown paths', () => {
    expect(named(server, 'server_tokens').map((directive) => directive.args)).toEqual([['off']]);
    for (const path of HEALTH_PATHS) {
      const location = locations.find((each) => each.args.join(' ') === `= ${path}`);
      expect(location, path).toBeDefined();
      expect(named(location!.block!, 'proxy_pass'), path).toEqual([]);
      expect(
        named(location!.block!, 'return').map((directive) => directive.args[0]),
        path,
      ).toEqual(['404']);
    }
  });
});

/** The service, believing what 127.0.0.1 (nginx) says, behind the template run by a real nginx. */
const behindNginx = appTest({ env: { TRUST_PROXY: '127.0.0.1' } }).extend('nginx', { scope: 'file' }, async ({ port }, { onCleanup }) => {
  const nginx = await startNginx({ upstream: { host: '127.0.0.1', port } });
  onCleanup(() => nginx.close());
  return nginx;
});

describeNeeding(NEEDS.nginx)('nginx running the template in front of the service', () => {
  const test = behindNginx;

  test("a client's X-Request-Id never reaches the service: the response and the log line carry nginx's id", async ({ t, nginx }) => {
    const requestLine = (id: string) => t.logs.entries().filter((entry) => entry.msg === 'request' && entry.reqId === id);
    const send = (id: string) => fetch(`${nginx.origin}/v1/pets`, { headers: { ...t.auth, 'x-request-id': id } });
    const chosen = await send('client-chosen-id-123');
    expect(chosen.status).toBe(200);
    const given = chosen.headers.get('x-request-id')!;
    expect(given).toMatch(NGINX_ID);
    expect(requestLine(given)).toMatchObject([{ status: 200 }]);
    expect(t.logs.lines.join('\n')).not.toContain('client-chosen-id-123');
    expect(await nginx.accessLog()).toContain(`id=${given}`);
    // An id an earlier request had, sent again: a new one, and the earlier id stays one request's.
    const replayed = await send(given);
    expect(replayed.headers.get('x-request-id')).toMatch(NGINX_ID);
    expect(replayed.headers.get('x-request-id')).not.toBe(given);
    expect(requestLine(given)).toHaveLength(1);
  });

  test("nginx's own answers carry its id and announce no version", async ({ t, nginx }) => {
    for (const response of [await fetch(`${nginx.origin}/v1/pets`, { headers: t.auth }), await fetch(`${nginx.origin}/readyz`)]) {
      expect(response.headers.get('server')).toBe('nginx');
      expect(response.headers.get('x-request-id')).toMatch(NGINX_ID);
    }
  });

  test('health and readiness are not served through it, however the path is spelled', async ({ t, nginx }) => {
    for (const path of [...HEALTH_PATHS, '//readyz', '/%72eadyz', '/readyz?verbose=1', '/healthz/../readyz']) {
      const response = await fetch(`${nginx.origin}${path}`);
      expect(response.status, path).toBe(404);
      expect(response.headers.get('content-type'), path).toBe('application/json; charset=utf-8');
      const body = (await response.json()) as { message: string };
      expect(body, path).toEqual({
        code: 'not_found',
        message: expect.stringMatching(/^No route for GET \/(healthz|readyz)$/),
        status: 404,
      });
    }
    expect(t.logs.entries().filter((entry) => entry.msg === 'request' && /^\/(healthz|readyz)/.test(String(entry.route)))).toEqual([]);
  });
});
