import { expect, it } from 'vitest';
import { freePort } from '../../harness/free-port.js';

// The system offers a closed port again soon enough that 500 sockets opened and closed in a row
// met a dozen repeats; a test that takes two ports (the API's and the admin's) must get two.
it('hands out no port twice in a process', async () => {
  const ports = [];
  for (let i = 0; i < 500; i++) ports.push(await freePort());
  expect(new Set(ports).size).toBe(ports.length);
});
