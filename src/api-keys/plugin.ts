import { randomBytes } from 'node:crypto';
import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import { NoticeBarrier } from '../platform/db/notice-barrier.js';
import { KeyFilter } from './key-filter.js';
import { createApiKeysRepository, type ApiKeysRepository } from './repository.js';
import { createKeyRules, type KeyRules } from './rules.js';
import { KeyCache, parseApiKeysChange } from './key-cache.js';

declare module 'fastify' {
  interface FastifyInstance {
    apiKeysRepository: ApiKeysRepository;
    /** What may be done to a key, with its audit entry: the admin API's and the keys command's changes. */
    keyRules: KeyRules;
    /** The API keys recently used on this instance, kept current by the api_key_changed notices. */
    keyCache: KeyCache;
    /** Which hashes may be stored keys, kept current by the same notices. */
    keyFilter: KeyFilter;
    keyNotices: {
      /**
       * Resolves to true once every key change notice sent before the call has been applied here
       * (the key filter holds the keys they name), false when that was not made sure of in time.
       * A database round trip (one at a time, shared), only for a request about to be refused.
       */
      catchUp(): Promise<boolean>;
    };
  }
}

/** How long a catch-up may take before the requests it holds are refused as they would have been without it. */
const CATCH_UP_TIMEOUT_MS = 2_000;
/** Catch-ups start this far apart at least: a refused request waits a little longer, a flood of them costs little. */
const CATCH_UP_INTERVAL_MS = 100;

export interface ApiKeysOptions {
  /** Keys (and unknown hashes) the key cache holds at most. */
  cacheMaxEntries: number;
  /** RATE_LIMIT_COSTS, which a key's own limits must fit (the key rules). */
  costs: Record<string, number>;
}

/**
 * API keys: the repository operators and the admin API change them through; the key cache of this
 * instance, filled by lookups and emptied by the change notices of any instance or operator; and
 * the filter of stored keys (src/api-keys/key-filter.ts), loaded in the background so that start-up does
 * not wait for the key table (until then a key this instance has not seen needs its address's
 * lookup budget), which hears of new keys on the same listening connection. Everything is
 * forgotten, and the filter reloaded, when that connection comes back, since notices may have
 * been lost meanwhile.
 */
export default fp<ApiKeysOptions>(
  async function apiKeys(app, { cacheMaxEntries, costs }) {
    const repository = createApiKeysRepository(app.db);
    const cache = new KeyCache(repository, { maxEntries: cacheMaxEntries, now: app.now });
    const filter = new KeyFilter(repository, {
      onError: (error) => app.log.warn({ err: error }, 'API key filter: reading keys failed'),
      onLearned: (hashes) => cache.forgetUnknown(hashes),
    });
    void filter.reload();
    app.addHook('onClose', () => filter.stop());
    new Gauge({
      name: 'api_key_cache_entries',
      help: 'API keys (and unknown hashes) this instance holds in memory',
      registers: [app.metricsRegistry],
      collect() {
        this.set(cache.size);
      },
    });
    // A key change made anywhere shows here within milliseconds; a flat count while keys change is a lost listener.
    const notices = new Counter({
      name: 'api_key_change_notices_total',
      help: 'Notices of changed API keys this instance has applied to its key cache',
      registers: [app.metricsRegistry],
    });
    const catchUps = new Counter({
      name: 'api_key_notice_catch_ups_total',
      help: 'Round trips to the database to make sure every key change notice sent was applied, before refusing a key this instance has not seen',
      registers: [app.metricsRegistry],
    });
    // A channel of this instance's own, on the listening connection of the notices it catches up with.
    const barrier = new NoticeBarrier(app.db, `api_key_notices_heard_${randomBytes(8).toString('hex')}`, {
      timeoutMs: CATCH_UP_TIMEOUT_MS,
      minIntervalMs: CATCH_UP_INTERVAL_MS,
      // Heard, the notices before it were handed to the filter: applied once it has read the keys they name.
      applied: () => filter.settled(),
      onSend: () => catchUps.inc(),
    });
    const stopListening = await app.db.listen(
      ['api_key_changed', barrier.channel],
      (payload, channel) => {
        if (channel === barrier.channel) return barrier.heard(payload);
        const change = parseApiKeysChange(payload);
        cache.invalidate(change);
        notices.inc();
        if (change === '*') void filter.reload();
        // A customer's change makes no key usable or unusable: nothing for the filter.
        else if (Array.isArray(change)) void filter.learn(change);
      },
      () => {
        cache.invalidate('*');
        void filter.reload();
        barrier.resubscribed();
      },
    );
    app.addHook('onClose', stopListening);
    app.decorate('apiKeysRepository', repository);
    app.decorate('keyRules', createKeyRules(app.db, repository, costs));
    app.decorate('keyCache', cache);
    app.decorate('keyFilter', filter);
    app.decorate('keyNotices', { catchUp: () => barrier.pass() });
  },
  { name: 'api-keys', dependencies: ['database', 'metrics'] },
);
