import type { Queryable, Transaction } from '../platform/db/database.js';
import { DATABASE_CODES, DatabaseUnavailableError } from '../platform/db/errors.js';
import { hasCode } from '../platform/domain-errors.js';
import type { ReplicaReads } from '../platform/db/replicas.js';
import { groupCommit } from '../platform/lib/group-commit.js';
import type { NewPet, Pet, PetStatus } from './schemas.js';

/** The columns of COLUMNS, in order: rows come back as arrays, mapped straight to Pets. */
type PetRow = [id: number, name: string, categoryId: number, status: PetStatus | null];

const COLUMNS = 'id, name, category_id, status';

const statements = {
  // Any number of pets in one statement: arrays of names, categories and statuses, inserted in
  // their order, so ids ascend with it.
  insert: {
    name: 'pets_insert',
    text: `INSERT INTO pets (name, category_id, status)
           SELECT name, category_id, status
           FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS batch(name, category_id, status, position)
           ORDER BY position
           RETURNING ${COLUMNS}`,
    rowMode: 'array',
  },
  findById: { name: 'pets_find_by_id', text: `SELECT ${COLUMNS} FROM pets WHERE id = $1`, rowMode: 'array' },
  // $1 is the last id seen (0 on the first page); the status filter is a separate statement so
  // each one keeps a plan that walks its own index.
  listAfter: {
    name: 'pets_list_after',
    text: `SELECT ${COLUMNS} FROM pets WHERE id > $1 ORDER BY id LIMIT $2`,
    rowMode: 'array',
  },
  listByStatusAfter: {
    name: 'pets_list_by_status_after',
    text: `SELECT ${COLUMNS} FROM pets WHERE status = $3 AND id > $1 ORDER BY id LIMIT $2`,
    rowMode: 'array',
  },
} as const;

/** A pet without a status has no `status` property at all. */
function toPet([id, name, categoryId, status]: PetRow): Pet {
  return status === null ? { id, name, categoryId } : { id, name, categoryId, status };
}

export interface ListQuery {
  limit: number;
  status?: PetStatus;
  /** The last id seen; 0, or absent, for the first page. */
  afterId?: number;
}

export interface ListPage {
  pets: Pet[];
  /** The last id of this page when another page follows. */
  nextAfterId?: number;
}

/** Creates in one INSERT at most, and INSERTs under way at once at most. */
const MAX_BATCH = 100;
const MAX_INSERTS_IN_FLIGHT = 2;
/**
 * How long a create may wait for its INSERT to leave: as long as for a pool connection, so that
 * behind INSERTs a frozen database holds, waits stay as bounded as without batching.
 */
const MAX_WAIT_MS = 5_000;

/**
 * Pets on `db`; with `replicas`, reads go where they choose (a replica that has replayed every
 * change known here, or the primary), and each committed create tells them.
 */
export function createPetsRepository(db: Queryable, replicas?: ReplicaReads) {
  const reads: Queryable = replicas ?? db;

  async function insert(pets: NewPet[], target: Queryable = db): Promise<Pet[]> {
    const rows = await target.query<PetRow>(statements.insert, [
      pets.map((pet) => pet.name),
      pets.map((pet) => pet.categoryId),
      pets.map((pet) => pet.status ?? null),
    ]);
    return rows.sort((a, b) => a[0] - b[0]).map(toPet);
  }

  // Creates outside a transaction share multi-row INSERTs, each one commit. A row is retried
  // alone when its batch fails, unless the database is unavailable: it would refuse each again.
  const insertGrouped = groupCommit({
    send: async (pets: NewPet[]) => {
      const created = await insert(pets);
      replicas?.changed();
      return created;
    },
    maxBatch: MAX_BATCH,
    maxInFlight: MAX_INSERTS_IN_FLIGHT,
    maxWaitMs: MAX_WAIT_MS,
    timedOut: () => new DatabaseUnavailableError({ cause: new Error(`no INSERT could leave within ${MAX_WAIT_MS} ms`) }),
    final: (error) => hasCode(error, DATABASE_CODES.unavailable),
  });

  return {
    /** Within a transaction, the pet is inserted there and then; otherwise it joins the next batch. */
    async create(pet: NewPet, tx?: Transaction): Promise<Pet> {
      if (!tx) return insertGrouped(pet);
      const [created] = await insert([pet], tx);
      if (replicas) tx.afterCommit(() => replicas.changed());
      return created!;
    },

    /** A pet a replica does not have yet (its notice still on the way) is asked of the primary: no 404 after a 201. */
    async findById(id: number): Promise<Pet | undefined> {
      const [row] = replicas
        ? await replicas.queryConfirmingEmpty<PetRow>(statements.findById, [id])
        : await db.query<PetRow>(statements.findById, [id]);
      return row && toPet(row);
    },

    /** One keyset page in id order; reads one row more than asked to learn whether more follow. */
    async list({ limit, status, afterId = 0 }: ListQuery): Promise<ListPage> {
      const rows = status
        ? await reads.query<PetRow>(statements.listByStatusAfter, [afterId, limit + 1, status])
        : await reads.query<PetRow>(statements.listAfter, [afterId, limit + 1]);
      const pets = rows.slice(0, limit).map(toPet);
      return rows.length > limit ? { pets, nextAfterId: pets[pets.length - 1]!.id } : { pets };
    },
  };
}

export type PetsRepository = ReturnType<typeof createPetsRepository>;
