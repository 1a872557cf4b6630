import fp from 'fastify-plugin';
import { KeyFilter } from '../key-filter.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Which hashes may be stored keys; the key cache's change notices keep it current (plugins/key-cache.ts). */
    keyFilter: KeyFilter;
  }
}

/**
 * The filter of stored keys, loaded in the background so that start-up does not wait for the
 * key table: until then a key this instance has not seen needs its address's lookup budget.
 */
export default fp(
  async function keyFilter(app) {
    const filter = new KeyFilter(app.apiKeysRepository, (error) => app.log.warn({ err: error }, 'API key filter: reading keys failed'));
    void filter.reload();
    app.addHook('onClose', () => filter.stop());
    app.decorate('keyFilter', filter);
  },
  { name: 'key-filter', dependencies: ['database', 'repositories'] },
);
