import type { Queryable } from '../db/database.js';
import type { NewPet, Pet, PetStatus } from '../schemas/pet.js';

/** The columns of COLUMNS, in order: rows come back as arrays, mapped straight to Pets. */
type PetRow = [id: number, name: string, categoryId: number, status: PetStatus | null];

const COLUMNS = 'id, name, category_id, status';

const statements = {
  insert: {
    name: 'pets_insert',
    text: `INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3) RETURNING ${COLUMNS}`,
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

export interface ListPage {
  pets: Pet[];
  /** The last id of this page when another page follows. */
  nextAfterId?: number;
}

export function createPetsRepository(db: Queryable) {
  return {
    async create(pet: NewPet): Promise<Pet> {
      const [row] = await db.query<PetRow>(statements.insert, [pet.name, pet.categoryId, pet.status ?? null]);
      return toPet(row!);
    },

    async findById(id: number): Promise<Pet | undefined> {
      const [row] = await db.query<PetRow>(statements.findById, [id]);
      return row && toPet(row);
    },

    /** One keyset page in id order; reads one row more than asked to learn whether more follow. */
    async list({ limit, status, afterId = 0 }: { limit: number; status?: PetStatus; afterId?: number }): Promise<ListPage> {
      const rows = status
        ? await db.query<PetRow>(statements.listByStatusAfter, [afterId, limit + 1, status])
        : await db.query<PetRow>(statements.listAfter, [afterId, limit + 1]);
      const pets = rows.slice(0, limit).map(toPet);
      return rows.length > limit ? { pets, nextAfterId: pets[pets.length - 1]!.id } : { pets };
    },
  };
}

export type PetsRepository = ReturnType<typeof createPetsRepository>;
