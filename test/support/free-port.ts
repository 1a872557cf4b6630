import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

/**
 * A loopback port nobody listens on now. Servers started as processes get one before they
 * start, so what they derive from their port (PUBLIC_BASE_URL) is right and no two collide.
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// Run as a command (`node --import tsx test/support/free-port.ts`), it prints one: CI's shell steps use it.
if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(await freePort());
