import pg from 'pg';
import { serveMinimal } from './minimal.js';

/**
 * The naive database ceiling: the service's own list and insert SQL (src/repositories/pets.ts)
 * through a plain pg Pool of the service's size, with no validation, auth, rate limiting or
 * request logging. Statements are unnamed, as most code writes them.
 */
const LIST = 'SELECT id, name, category_id, status FROM pets WHERE status = $3 AND id > $1 ORDER BY id LIMIT $2';
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
  app.get('/pets', async () => (await pool.query<PetRow>(LIST, [0, 20, 'available'])).rows.map(toPet));

  app.post<{ Body: { name: string; categoryId: number; status?: string } }>('/pets', async (request, reply) => {
    const { name, categoryId, status } = request.body;
    const { rows } = await pool.query<PetRow>(INSERT, [name, categoryId, status ?? null]);
    return reply.code(201).send(toPet(rows[0]!));
  });
});
