import type { ApiKeyIdentity } from '../../api-keys/identity.js';
import type { Limits } from '../../plans/limits.js';
import type { PlanBook } from '../../plans/ports.js';
import { clientOf } from '../address.js';
import type { Inspection, RateLimitStore, StoreKind } from '../stores/store.js';
import { addressSubject, ANONYMOUS, keyPolicy, keySubject, type KeyPolicy, type KeyQuota } from '../subjects.js';

/** What the admin API reads of the limiter and changes in it: a key's usage, the bans. */
export interface AdminOperations {
  /** What the limiter applies to a key: its own windows, else its plan's; its shadow mode and concurrency limit (keyPolicy). */
  policyOf(key: Pick<ApiKeyIdentity, 'plan' | 'limits' | 'enforceLimits' | 'concurrency'>): KeyPolicy;
  /** What a key's quota holds now (each of its windows, a ban), counting nothing, and which store answered (the admin API). */
  usage(key: KeyQuota, limits: Limits, now: number): Promise<Inspection>;
  /** Lifts a key's ban in the store decisions go to now (the admin API); says which. */
  liftBan(key: KeyQuota, now: number): Promise<StoreKind>;
  /** The clients (see clientOf) banned now, and which store answered (the admin API). */
  addressBans(now: number): Promise<{ bans: Array<{ address: string; bannedUntil: number }>; source: StoreKind }>;
  /**
   * Lifts the ban of the client an address (or a client as addressBans names it) counts as, in
   * the store decisions go to now; says which client, when its ban would have ended, if it had one, and which store.
   */
  liftAddressBan(address: string, now: number): Promise<{ address: string; bannedUntil?: number; source: StoreKind }>;
}

/** The admin API's operations on the store; `ipv6Prefix` as the limiter counts addresses (see clientOf). */
export function adminOperations(store: RateLimitStore, plans: PlanBook, ipv6Prefix: number): AdminOperations {
  return {
    policyOf: (key) => keyPolicy(plans, key),
    usage: (key, limits, now) => store.inspect(keySubject(key), limits, now),
    liftBan: (key, now) => store.liftBan(keySubject(key), now),

    async addressBans(now) {
      const { bans, source } = await store.bans(addressSubject(''), now);
      const listed = bans.map(({ subject, bannedUntil }) => ({ address: subject.slice(addressSubject('').length), bannedUntil }));
      return { bans: listed.sort((a, b) => a.address.localeCompare(b.address)), source };
    },

    async liftAddressBan(address, now) {
      const client = clientOf(address.replace(/\/\d+$/, ''), ipv6Prefix);
      const subject = addressSubject(client);
      const { decision } = await store.inspect(subject, ANONYMOUS, now);
      const source = await store.liftBan(subject, now);
      return { address: client, bannedUntil: decision.outcome === 'banned' ? decision.bannedUntil : undefined, source };
    },
  };
}
