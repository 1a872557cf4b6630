import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';
import { KeyCache } from '../key-cache.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The API keys recently used on this instance, kept current by the api_key_changed notices. */
    keyCache: KeyCache;
  }
}

/** A notice of the api_key_changed trigger (migrations/006): the changed key ids, comma separated, or `*` for many. */
export const parseKeyChange = (payload: string): number[] | '*' => (payload === '*' ? '*' : payload.split(',').map(Number));

/**
 * The key cache of this instance: filled by lookups, emptied by the change notices of any
 * instance or operator; everything is forgotten when the listening connection comes back, since
 * notices may have been lost meanwhile.
 */
export default fp<{ maxEntries: number }>(
  async function keyCache(app, { maxEntries }) {
    const keys = new KeyCache(app.apiKeysRepository, { maxEntries, now: app.now });
    new Gauge({
      name: 'api_key_cache_entries',
      help: 'API keys (and unknown hashes) this instance holds in memory',
      registers: [app.metricsRegistry],
      collect() {
        this.set(keys.size);
      },
    });
    const stopListening = await app.db.listen(
      'api_key_changed',
      (payload) => {
        const change = parseKeyChange(payload);
        keys.invalidate(change);
        // The key filter (plugins/key-filter.ts) hears of new keys here, on the same listening connection.
        if (change === '*') void app.keyFilter.reload();
        else void app.keyFilter.learn(change);
      },
      () => {
        keys.invalidate('*');
        void app.keyFilter.reload();
      },
    );
    app.addHook('onClose', stopListening);
    app.decorate('keyCache', keys);
  },
  { name: 'key-cache', dependencies: ['database', 'repositories', 'metrics', 'key-filter'] },
);
