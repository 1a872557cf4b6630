/**
 * The api_keys table's SQL: the columns read, a key's state, and the statements the repository
 * (repository.ts) runs, each prepared under its name.
 */

const COLUMN_NAMES = [
  'id',
  'name',
  'plan',
  'limits',
  'read_only',
  'quota_id',
  'created_at',
  'expires_at',
  'revoked_at',
  'replaced_by',
  'enforce_limits',
  'concurrency',
  'customer_id',
  'allowed_origins',
];
const COLUMNS = COLUMN_NAMES.join(', ');
/** The key's columns beside its customer's limits (NULL without a customer or limits) and both balances of credits, in one read. */
const WITH_CUSTOMER_LIMITS = `${COLUMN_NAMES.map((column) => `k.${column}`).join(', ')},
  c.limits AS customer_limits, c.concurrency AS customer_concurrency,
  q.id AS credits_id, q.base AS credits_base, q.version AS credits_version, q.next_refill_at AS credits_refill_at,
  cc.id AS customer_credits_id, cc.base AS customer_credits_base, cc.version AS customer_credits_version,
  cc.next_refill_at AS customer_credits_refill_at`;

/** A revoked key is revoked, also when it was rotated with no overlap; a rotated one stays rotated once its overlap ends. */
const STATE = `CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN replaced_by IS NOT NULL THEN 'rotated'
                    WHEN expires_at <= now() THEN 'expired' ELSE 'active' END`;
/** Its plan's windows, which the record shows as perMinute and perDay when the key has none of its own (NULL: none, or no such plan). */
const PLAN_LIMITS = '(SELECT p.limits FROM plans p WHERE p.name = api_keys.plan) AS plan_limits';
const RECORD_COLUMNS = `${COLUMNS}, ${STATE} AS state, ${PLAN_LIMITS}`;

const USABLE = 'revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())';

export const statements = {
  insert: {
    name: 'api_keys_insert',
    text: `INSERT INTO api_keys (name, plan, limits, key_hash, expires_at, read_only, quota_id, enforce_limits, concurrency, customer_id,
                                  allowed_origins)
           VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10, $11::text[]) RETURNING ${RECORD_COLUMNS}`,
  },
  list: { name: 'api_keys_list', text: `SELECT ${RECORD_COLUMNS} FROM api_keys ORDER BY id` },
  get: { name: 'api_keys_get', text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE id = $1` },
  // The key, and the keys rotated into it still in their overlap, which would otherwise outlive it: the
  // older keys of its quota (a quota's keys are one chain, each rotated into the next one made). One
  // statement, so one notice names them all.
  revoke: {
    name: 'api_keys_revoke',
    text: `UPDATE api_keys SET revoked_at = now()
           WHERE id = $1 OR ((quota_id = $2 OR id = $2) AND id < $1 AND revoked_at IS NULL AND expires_at > now())
           RETURNING ${RECORD_COLUMNS}`,
  },
  // Revoked keys are not usable; expired ones are returned with their expiry, which the caller
  // checks against its clock on every request, so expiry needs no notice. With its customer's
  // limits and the balances of credits of its quota and customer, so that the limiter reads no database (a change of
  // them is noticed as one of the key's: migrations/015 and 016).
  findUsable: {
    name: 'api_keys_find_usable',
    text: `SELECT ${WITH_CUSTOMER_LIMITS} FROM api_keys k LEFT JOIN customers c ON c.id = k.customer_id
           LEFT JOIN credit_balances q ON q.quota_id = coalesce(k.quota_id, k.id)
           LEFT JOIN credit_balances cc ON cc.customer_id = k.customer_id
           WHERE k.key_hash = $1 AND k.revoked_at IS NULL`,
  },
  forChange: { name: 'api_keys_for_change', text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE id = $1 FOR UPDATE` },
  // The key, and the keys rotated into it still in their overlap, which would otherwise outlive it
  // (a 30-day overlap rotated again with none): they stop when it does.
  retire: {
    name: 'api_keys_retire',
    text: `UPDATE api_keys
           SET replaced_by = CASE WHEN id = $1 THEN $2 ELSE replaced_by END,
               expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3::int)),
               revoked_at = CASE WHEN $3::int = 0 THEN now() END
           WHERE id = $1 OR ((quota_id = $4 OR id = $4) AND id < $1 AND revoked_at IS NULL
                             AND expires_at > now() + make_interval(secs => $3::int))
           RETURNING id`,
  },
  // The key, and the rotated keys of its quota still in their overlap: one statement, so one notice names them all.
  // Limits and origins stay on each key's row, so the limiter and auth read them from the key presented, with no
  // lookup of the quota's newest key.
  update: {
    name: 'api_keys_update',
    text: `UPDATE api_keys SET plan = $2, limits = $3::jsonb, name = CASE WHEN id = $1 THEN $4 ELSE name END,
                              enforce_limits = $6, concurrency = $7, allowed_origins = $8::text[]
           WHERE id = $1 OR ((quota_id = $5 OR id = $5) AND revoked_at IS NULL AND expires_at > now())
           RETURNING ${RECORD_COLUMNS}`,
  },
  // Usable keys for the key filter (src/api-keys/key-filter.ts): expired ones would only be refused.
  countUsable: { name: 'api_keys_count_usable', text: `SELECT count(*)::int AS count FROM api_keys WHERE ${USABLE}` },
  usableHashes: {
    name: 'api_keys_usable_hashes',
    text: `SELECT id, key_hash FROM api_keys WHERE id > $1 AND ${USABLE} ORDER BY id LIMIT $2`,
  },
  usableHashesOf: {
    name: 'api_keys_usable_hashes_of',
    text: `SELECT id, key_hash FROM api_keys WHERE id = ANY($1::bigint[]) AND ${USABLE}`,
  },
} as const;

/** The admin listing's filters, as SQL conditions on their parameter. */
const FILTERS = { plan: 'plan = $', name: 'name = $', state: `${STATE} = $`, customerId: 'customer_id = $' } as const;

/**
 * A page of keys after an id, with the filters given and no others: one statement per combination,
 * so each is planned for its own (the name and plan indexes of migrations/008, the customer's of 014), where one
 * statement with optional filters would be planned for none.
 */
export function pageStatement(filters: Array<keyof typeof FILTERS>) {
  const conditions = ['id > $1', ...filters.map((filter, i) => `${FILTERS[filter]}${i + 2}`)];
  return {
    name: `api_keys_page_${filters.join('_') || 'all'}`,
    text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE ${conditions.join(' AND ')} ORDER BY id LIMIT $${filters.length + 2}`,
  };
}
