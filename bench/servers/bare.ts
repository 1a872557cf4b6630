import { serveMinimal } from './minimal.js';

/** The framework's ceiling: a page of 20 pets, always the same, straight from memory. */
const PAGE = Array.from({ length: 20 }, (_, index) => ({
  id: index + 1,
  name: `pet ${index + 1}`,
  categoryId: 1 + (index % 12),
  status: 'available',
}));

await serveMinimal((app) => {
  app.get('/pets', async () => PAGE);
});
