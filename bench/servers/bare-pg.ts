import pg from 'pg';
import { serveMinimal } from './minimal.js';

/**
 * The naive database ceiling: the service's own list and insert SQL (src/pets/repository.ts)
 * through a plain pg Pool of the service's size, with no validation, auth, rate limiting, caching or
 * request logging. Statements are unnamed, as most code writes them.
 */
const LIST_BY_STATUS = 'SELECT id, name, category_id, status FROM pets WHERE status = $3 AND id > $1 ORDER BY id LIMIT $2';
const LIST = 'SELECT id, name, category_id, status FROM pets WHERE id > $1 ORDER BY id LIMIT $2';
const INSERT = 'INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3) RETURNING id, name, category_id, status';

interface PetRow {
  id: string;
  name: string;
  category_id: string;
  status: string | null;
}

const toPet = (row: PetRow) => ({ id: Number(row.id), name: row.name, categoryId: Number(row.category_id), status: row.status });

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });

await serveMinimal((app) => {
  // The hot page: the first 20 available pets.
  app.get('/pets', async () => (await pool.query<PetRow>(LIST_BY_STATUS, [0, 20, 'available'])).rows.map(toPet));

  // Any page of the unfiltered listing, as the service reads it: one row more than asked, to know
  // whether a next page follows, and then a Link to it.
  app.get<{ Querystring: { after: string; limit: string } }>('/walk', async (request, reply) => {
    const after = Number(request.query.after);
    const limit = Number(request.query.limit);
    const { rows } = await pool.query<PetRow>(LIST, [after, limit + 1]);
    const pets = rows.slice(0, limit).map(toPet);
    if (rows.length > limit) reply.header('link', `</walk?after=${pets[pets.length - 1]!.id}&limit=${limit}>; rel="next"`);
    return pets;
  });

  app.post<{ Body: { name: string; categoryId: number; status?: string } }>('/pets', async (request, reply) => {
    const { name, categoryId, status } = request.body;
    const { rows } = await pool.query<PetRow>(INSERT, [name, categoryId, status ?? null]);
    return reply.code(201).send(toPet(rows[0]!));
  });
});
