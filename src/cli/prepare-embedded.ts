import { preparePgliteTemplate, PGLITE_TEMPLATE_DIR } from '../platform/db/pglite.js';

/** Run at install (npm's prepare): initdb and the migrations of the embedded database once, so that a first start does not wait for them. */
const started = performance.now();
const outcome = await preparePgliteTemplate();
if (outcome === 'made') {
  console.log(
    `Prepared the embedded database (initdb and migrations, once per PGlite version and set of migrations) in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
} else if (outcome === 'not kept') {
  // Not an install failure: the embedded database still works, each new one just runs initdb itself.
  console.warn(
    `Could not keep the embedded database's template in ${PGLITE_TEMPLATE_DIR}: each new embedded database will run initdb (a few seconds).`,
  );
}
