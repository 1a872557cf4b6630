// The test page's script (test/browser/): calls the pet store API from another origin as a web page
// would, with the platform's fetch and with the official client imported as an ES module, answers
// what it could read of each answer, and shows it in the page's table.
import { PetStoreClient } from '/client/index.js';

document.getElementById('origin').textContent = location.origin;

/** Sends one request with fetch; answers what the script can read of the answer, or what fetch threw. */
async function call(url, { method = 'GET', key, headers = {}, json, cache = 'default' } = {}) {
  const init = { method, headers: { ...headers }, cache };
  if (key) init.headers.authorization = `Bearer ${key}`;
  if (json !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(json);
  }
  const target = new URL(url);
  return show(`${method} ${target.pathname}${target.search}`, await readAnswer(() => fetch(url, init)));
}

async function readAnswer(send) {
  try {
    const response = await send();
    const text = await response.text();
    // Every header the browser lets a script read: the CORS-safelisted ones and those the service exposes.
    return { status: response.status, headers: Object.fromEntries(response.headers), body: parsed(text) };
  } catch (error) {
    return { error: `${error.name}: ${error.message}` };
  }
}

function parsed(text) {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return text;
  }
}

/** The official client's createPet(), listPets() and getRateLimit(), and the rate limit it read from the headers. */
async function useClient(baseUrl, apiKey) {
  const client = new PetStoreClient({ baseUrl, apiKey, maxRetries: 0 });
  try {
    const created = await client.createPet({ name: 'Pixel', categoryId: 1, status: 'available' });
    const pets = await client.listPets({ limit: 2 });
    const { limit, remaining, reset } = client.rateLimit;
    const status = await client.getRateLimit();
    const body = {
      created: created.name,
      pets: pets.map((pet) => pet.name),
      rateLimit: { limit, remaining, reset: reset.toISOString() },
      plan: status.plan,
      windows: status.windows.map((window) => `${window.name} ${window.remaining}/${window.limit}`),
    };
    return show('client: createPet(), listPets({ limit: 2 }), rateLimit, getRateLimit()', { status: 'ok', headers: {}, body });
  } catch (error) {
    return show('client', { error: `${error.name}: ${error.code ?? ''} ${error.message}` });
  }
}

/** Adds a row to the page's table: what was called and what was read. */
function show(what, read) {
  const row = document.createElement('tr');
  const headers = Object.entries(read.headers ?? {}).map(([name, value]) => `${name}: ${value}`);
  for (const text of [what, read.error ?? String(read.status), headers.join('\n'), truncated(JSON.stringify(read.body ?? null))]) {
    const cell = document.createElement('td');
    cell.textContent = text;
    cell.style.whiteSpace = 'pre-wrap';
    row.append(cell);
  }
  document.getElementById('reads').append(row);
  return read;
}

const truncated = (text) => (text.length > 300 ? `${text.slice(0, 300)}…` : text);

window.petStore = { call, useClient };
