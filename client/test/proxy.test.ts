// The client behind a reverse proxy that rewrites Host, in front of the real service (buildTestApp
// on its embedded database, over loopback HTTP) started without PUBLIC_BASE_URL.
import { appTest, expect } from '../../test/support/fixtures.js';
import { freePort } from '../../harness/free-port.js';
import { PetStoreClient, type Pet } from '../src/index.js';
import { hostRewritingProxy, recordingFetch } from './support.js';

const PORT = await freePort();
const UPSTREAM = `http://127.0.0.1:${PORT}`;
// No PUBLIC_BASE_URL: the service's links name the address it listens on, HOST and PORT.
const test = appTest({ env: { PUBLIC_BASE_URL: '', HOST: '127.0.0.1', PORT: String(PORT) } }).extend(
  'proxy',
  { scope: 'file' },
  async ({ t }, { onCleanup }) => {
    await t.app.listen({ port: PORT, host: '127.0.0.1' });
    const proxy = await hostRewritingProxy(PORT);
    onCleanup(() => proxy.close());
    return proxy;
  },
);

test("allPets walks every page through the proxy: each next link names the upstream's address, and only its cursor is taken", async ({
  t,
  proxy,
}) => {
  const created: Pet[] = [];
  for (let i = 0; i < 45; i++) created.push(await t.app.petsRepository.create({ name: `Proxied ${i}`, categoryId: 4, status: 'sold' }));
  const recorded = recordingFetch();
  const apiKey = t.auth.authorization.slice('Bearer '.length);
  const client = new PetStoreClient({ baseUrl: `${proxy.origin}/v1`, apiKey, fetch: recorded.fetch });

  const walked: Pet[] = [];
  for await (const pet of client.allPets({ status: 'sold', limit: 10 })) walked.push(pet);

  expect(walked).toEqual(created);
  const { exchanges } = recorded;
  expect(exchanges.map((exchange) => exchange.status)).toEqual([200, 200, 200, 200, 200]);
  // The service named its own address, which the key was never sent to: every request went to the proxy.
  expect(exchanges[0]!.headers!.get('link')).toMatch(new RegExp(`^<${UPSTREAM}/v1/pets\\?`));
  expect(exchanges.every((exchange) => exchange.url.startsWith(`${proxy.origin}/v1/pets?`))).toBe(true);
  expect(proxy.forwarded).toHaveLength(exchanges.length);
  expect(proxy.forwarded.every((request) => request.host === `127.0.0.1:${PORT}`)).toBe(true);

  const first = await client.listPetsPage({ status: 'sold', limit: 40 });
  expect(first.pets).toEqual(created.slice(0, 40));
  const last = await client.listPetsPage({ status: 'sold', limit: 40, cursor: first.nextCursor });
  expect(last).toMatchObject({ pets: created.slice(40), nextCursor: undefined });
});
