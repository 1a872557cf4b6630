// What the client's tests put around a real server: a fetch that records what went over the wire,
// a TCP proxy that loses one answer, and a server that never answers; and, for what the real service
// cannot be made to answer (a gateway's HTML page, a hostile Link, a minute's Retry-After), a fake one.
import { createServer as createHttpServer, request as httpRequest, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';

export interface Exchange {
  /** performance.now() when it was sent. */
  sentAt: number;
  method: string;
  url: string;
  requestHeaders: Headers;
  status?: number;
  headers?: Headers;
  error?: unknown;
}

/** The platform's fetch, recording each request and its answer (or failure): the client's traffic as sent. */
export function recordingFetch() {
  const exchanges: Exchange[] = [];
  const recorded: typeof fetch = async (input, init) => {
    const exchange: Exchange = {
      sentAt: performance.now(),
      method: init?.method ?? 'GET',
      url: input instanceof Request ? input.url : String(input),
      requestHeaders: new Headers(init?.headers),
    };
    exchanges.push(exchange);
    try {
      const response = await fetch(input, init);
      exchange.status = response.status;
      exchange.headers = response.headers;
      return response;
    } catch (error) {
      exchange.error = error;
      throw error;
    }
  };
  const statuses = () => exchanges.map((exchange) => exchange.status ?? 'failed');
  const count = (status: number) => exchanges.filter((exchange) => exchange.status === status).length;
  /** The longest time between two requests sent, in seconds (for the figures the tests print). */
  const longestGap = () =>
    (Math.max(0, ...exchanges.slice(1).map((exchange, index) => exchange.sentAt - exchanges[index]!.sentAt)) / 1000).toFixed(1);
  return { fetch: recorded, exchanges, statuses, count, longestGap };
}

async function listening(server: Server): Promise<{ origin: string; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sockets = new Set<Socket>();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * A TCP proxy to a loopback port that, once armed, lets the next `POST /v1/pets` through and cuts
 * the connection the moment the server's answer comes back: the server has committed the create,
 * the client never hears of it.
 */
export async function answerLosingProxy(targetPort: number) {
  let armed = false;
  let lost = 0;
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    let losing = false;
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.toString('latin1').startsWith('POST /v1/pets ')) {
        armed = false;
        losing = true;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!losing) return void client.write(chunk);
      lost++;
      closeBoth();
    });
    client.on('error', closeBoth).on('close', closeBoth);
    upstream.on('error', closeBoth).on('close', closeBoth);
  });
  const proxy = await listening(server);
  return {
    ...proxy,
    loseNextCreateAnswer: () => void (armed = true),
    lostAnswers: () => lost,
  };
}

/**
 * An HTTP reverse proxy to a loopback port that sends each request on with `Host` set to its
 * upstream's address, as nginx does by default (`proxy_set_header Host $proxy_host`): a service
 * behind it without PUBLIC_BASE_URL names its own address in its links, not the proxy's.
 */
export async function hostRewritingProxy(targetPort: number) {
  const forwarded: Array<{ url: string; host: string | undefined }> = [];
  const server = createHttpServer((request, response) => {
    const headers = { ...request.headers, host: `127.0.0.1:${targetPort}` };
    const upstream = httpRequest({ host: '127.0.0.1', port: targetPort, method: request.method, path: request.url, headers }, (answer) => {
      forwarded.push({ url: request.url!, host: headers.host });
      response.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(response);
    });
    upstream.on('error', () => response.destroy());
    request.pipe(upstream);
  });
  return { ...(await listening(server)), forwarded };
}

/** A server that reads requests but never answers; counts the requests it received. */
export async function silentServer() {
  let requests = 0;
  const server = createServer((socket) => {
    socket.on('data', (chunk: Buffer) => {
      if (/^[A-Z]+ \S+ HTTP\/1\.1\r\n/.test(chunk.toString('latin1'))) requests++;
    });
  });
  return { ...(await listening(server)), requests: () => requests };
}

/** A request a fake server received. */
export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * An HTTP server on a loopback port answering each request as `answer` says (given the request and
 * how many came before it): a gateway, a hostile server, a service out of quota.
 */
export async function fakeServer(answer: (request: ReceivedRequest, response: ServerResponse, index: number) => void) {
  const requests: ReceivedRequest[] = [];
  const server = createHttpServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      const received = { method: request.method!, url: request.url!, headers: request.headers, body };
      requests.push(received);
      answer(received, response, requests.length - 1);
    });
  });
  return { ...(await listening(server)), requests };
}

/** Answers JSON, as the service does. */
export function answerJson(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  response.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
}

/** Answers as nginx does when the upstream is down: an HTML page. */
export function answerGatewayPage(response: ServerResponse, status: 502 | 503 | 504) {
  const page = `<html><head><title>${status} Bad Gateway</title></head><body><center><h1>${status}</h1></center><hr><center>nginx</center></body></html>`;
  response.writeHead(status, { 'content-type': 'text/html' }).end(page);
}
