import { preparePgliteTemplate } from '../db/pglite.js';

/** Run at install (npm's prepare): initdb of the embedded database once, so that a first start does not wait for it. */
const started = performance.now();
if (await preparePgliteTemplate()) {
  console.log(`Prepared the embedded database (initdb, once per PGlite version) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
