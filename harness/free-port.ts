import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

const handedOut = new Set<number>();

/**
 * A loopback port nobody listens on now. Servers started as processes get one before they
 * start, so what they derive from their port (PUBLIC_BASE_URL) is right and no two collide.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    await new Promise((resolve) => server.close(resolve));
    // The system may offer a port again once closed: one handed out for a server not yet
    // listening (an admin port, then the API's) must not be handed out twice.
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
}

// Run as a command (`node --import tsx harness/free-port.ts`), it prints one: CI's shell steps use it.
if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(await freePort());
