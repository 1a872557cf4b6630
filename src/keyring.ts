import type { Database } from './db/database.js';
import { hashKey, isWellFormedKey, type ApiKeyIdentity, type ApiKeysRepository } from './repositories/api-keys.js';

const CHANNEL = 'api_key_changed';

/**
 * Every active key, by hash, in memory: identifying a request costs a hash and a map lookup,
 * never a database round trip, and an unknown key (however many are tried) costs no more and
 * adds nothing. Memory follows the number of active keys. A NOTIFY from the api_keys trigger
 * refreshes one key on every instance at once; a lost listener reloads them all when it is back.
 */
export class Keyring {
  readonly #byHash = new Map<string, ApiKeyIdentity>();
  readonly #hashById = new Map<number, string>();
  readonly #keys: ApiKeysRepository;
  /** Changes apply one after another, so a slow reload cannot undo a later revocation. */
  #changes: Promise<void> = Promise.resolve();
  #stopListening: () => Promise<void> = async () => {};

  constructor(keys: ApiKeysRepository) {
    this.#keys = keys;
  }

  async start(db: Database, onError: (error: unknown) => void): Promise<void> {
    const apply = (change: () => Promise<void>) => {
      this.#changes = this.#changes.then(change).catch(onError);
    };
    this.#stopListening = await db.listen(
      CHANNEL,
      (id) => apply(() => this.#refresh(Number(id))),
      () => apply(() => this.#reload()),
    );
    await this.#reload();
  }

  stop(): Promise<void> {
    return this.#stopListening();
  }

  /** The identity behind a presented key, or undefined for a malformed, unknown or revoked one. */
  identify(key: string): ApiKeyIdentity | undefined {
    return isWellFormedKey(key) ? this.#byHash.get(hashKey(key).toString('base64')) : undefined;
  }

  async #reload() {
    const active = await this.#keys.active();
    this.#byHash.clear();
    this.#hashById.clear();
    for (const { hash, identity } of active) this.#add(hash, identity);
  }

  async #refresh(id: number) {
    const [active] = await this.#keys.active(id);
    const previous = this.#hashById.get(id);
    if (previous !== undefined) this.#byHash.delete(previous);
    this.#hashById.delete(id);
    if (active) this.#add(active.hash, active.identity);
  }

  #add(hash: Buffer, identity: ApiKeyIdentity) {
    const key = hash.toString('base64');
    this.#byHash.set(key, identity);
    this.#hashById.set(identity.id, key);
  }
}
