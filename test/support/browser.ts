import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, resolve, sep } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { ROOT } from '../../harness/processes.js';

/** Debian's chromium (.ci/install-browser.sh installs it), driven by playwright-core. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Headless, in a fresh profile, and quiet: without the background-networking flags Chromium keeps
 * trying to reach Google's services (updates, sync, safe browsing) through a network that has none.
 */
export async function launchChromium() {
  const profile = await mkdtemp(join(tmpdir(), 'pets-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

const PAGE_DIR = join(ROOT, 'test/browser/page');
/** The official client as `npm run build` writes it: the ES modules a page imports. */
const CLIENT_DIR = join(ROOT, 'client/dist');
const TYPES: Record<string, string> = { '.html': 'text/html', '.js': 'text/javascript', '.map': 'application/json' };

/** The file a page server serves for a path: the page, its script, or a module of the built client under /client/. */
function fileOf(pathname: string): string | undefined {
  if (pathname === '/') return join(PAGE_DIR, 'index.html');
  if (pathname === '/page.js') return join(PAGE_DIR, 'page.js');
  if (!pathname.startsWith('/client/')) return undefined;
  const file = resolve(CLIENT_DIR, `.${decodeURIComponent(pathname.slice('/client'.length))}`);
  return file.startsWith(CLIENT_DIR + sep) ? file : undefined;
}

/** A tiny static server on a loopback port of its own: one origin of the test page. */
async function servePage(): Promise<{ origin: string; server: Server }> {
  const server = createServer((request, response) => {
    const file = fileOf(new URL(request.url ?? '/', 'http://page').pathname);
    readFile(file ?? '').then(
      (content) => response.writeHead(200, { 'content-type': TYPES[extname(file!)] ?? 'application/octet-stream' }).end(content),
      () => response.writeHead(404).end(),
    );
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  return { origin: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

/** `count` origins serving the test page (ports of their own: each is an origin of its own to a browser). */
export async function servePages(count: number) {
  const pages = await Promise.all(Array.from({ length: count }, servePage));
  return {
    origins: pages.map((page) => page.origin),
    close: () => Promise.all(pages.map(({ server }) => new Promise((closed) => server.close(closed)))),
  };
}

/** What the page's script read of an answer: the status, the headers a script may read and the body; or what fetch threw. */
export interface Read {
  status?: number | 'ok';
  headers?: Record<string, string>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- whatever JSON came back, as response.json() gives it
  body?: any;
  error?: string;
}

export interface CallOptions {
  method?: 'GET' | 'POST';
  key?: string;
  headers?: Record<string, string>;
  json?: unknown;
  /** fetch's cache mode; by default the browser's HTTP cache is used, as a page's fetch uses it. */
  cache?: RequestCache;
}

/** The page's script as it puts itself on `window` (test/browser/page/page.js). */
interface PageScript {
  petStore: {
    call(url: string, options: CallOptions): Promise<Read>;
    useClient(baseUrl: string, apiKey: string): Promise<Read>;
  };
}

/** One line per answer, what the page read, for the run's log (and the issue's closing note). */
function logRead(origin: string, what: string, read: Read) {
  const headers = Object.entries(read.headers ?? {}).map(([name, value]) => `${name}: ${value}`);
  const body = JSON.stringify(read.body ?? null);
  const shown = read.error ?? [read.status, ...headers, `body ${body.length > 200 ? `${body.slice(0, 200)}…` : body}`].join(' | ');
  console.log(`page ${origin} ${what} -> ${shown}`);
}

/**
 * The test page loaded from `origin` in a tab of the browser: `call` has the page's script fetch a
 * URL, `useClient` has it use the official client; both answer what it read, log it and show it.
 */
export async function openPage(context: BrowserContext, origin: string) {
  const page: Page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(error.message));
  await page.goto(`${origin}/`);
  // The module script (and the client it imports) loaded and ran: a failure names why.
  await page
    .waitForFunction(() => 'petStore' in globalThis)
    .catch((error: Error) => {
      throw new Error(`The test page's script did not load: ${problems.join('; ') || error.message}`);
    });
  let calls = 0;
  // Each function given to evaluate runs in the page: it may use nothing of this module.
  return {
    page,
    origin,
    /** How many calls this page has been asked to make so far. */
    calls: () => calls,
    /** The rows of the page's table: one per call it made. */
    rows: () => page.locator('#reads tr').count(),
    async call(url: string, options: CallOptions = {}) {
      calls++;
      const read = await page.evaluate(([url, options]) => (globalThis as unknown as PageScript).petStore.call(url, options), [
        url,
        options,
      ] as const);
      logRead(origin, `${options.method ?? 'GET'} ${new URL(url).pathname}${new URL(url).search}`, read);
      return read;
    },
    async useClient(baseUrl: string, apiKey: string) {
      calls++;
      const read = await page.evaluate(([baseUrl, apiKey]) => (globalThis as unknown as PageScript).petStore.useClient(baseUrl, apiKey), [
        baseUrl,
        apiKey,
      ] as const);
      logRead(origin, 'client createPet(), listPets(), getRateLimit()', read);
      return read;
    },
    /** Saves a picture of the page as it shows what it read, outside the repository; answers its path. */
    async screenshot(name: string) {
      const path = join(process.env.BROWSER_SCREENSHOT_DIR ?? tmpdir(), `${name}-${Date.now()}.png`);
      await page.screenshot({ path, fullPage: true });
      console.log(`screenshot of the test page: ${path}`);
      return path;
    },
  };
}
