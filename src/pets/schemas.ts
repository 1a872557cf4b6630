import { Type, type Static } from '@sinclair/typebox';
import { Cursor, Id, Name, PageLimit } from '../platform/schemas/common.js';

/** The statuses, listed once: the schema and its error message are built from them. */
const PET_STATUSES = ['available', 'pending', 'sold'] as const;

export const PetStatus = Type.Union(
  PET_STATUSES.map((status) => Type.Literal(status)),
  { description: 'Availability of the animal', 'x-error-message': `must be one of ${PET_STATUSES.join(', ')}` },
);
export type PetStatus = Static<typeof PetStatus>;

export const NewPet = Type.Object(
  {
    name: Name({
      max: 255,
      description: "The animal's name: 1 to 255 characters, one of them visible; no control characters or bidi overrides",
    }),
    categoryId: Type.Integer({
      ...Id,
      description: 'Identifier of the category the animal belongs to',
    }),
    status: Type.Optional(PetStatus),
  },
  {
    title: 'NewPet',
    description: 'An animal to add. Unknown fields are ignored.',
    'x-error-message': 'must be a JSON object',
  },
);
export type NewPet = Static<typeof NewPet>;

export const Pet = Type.Object(
  {
    id: Type.Integer({ ...Id, description: 'Unique identifier assigned by the service on creation' }),
    name: Type.String({ description: "The animal's name" }),
    categoryId: Type.Integer({ format: 'int64', description: 'Identifier of the category the animal belongs to' }),
    status: Type.Optional(PetStatus),
  },
  { title: 'Pet', description: 'An animal; status is absent when the animal was created without one.' },
);
export type Pet = Static<typeof Pet>;

export const Pets = Type.Array(Pet, { title: 'Pets', description: 'One page of animals, in id order' });

export const PetParams = Type.Object({
  petId: Type.Integer({ ...Id, description: 'Identifier of the animal to fetch' }),
});

export const ListPetsQuery = Type.Object({
  limit: PageLimit('Maximum number of animals to return'),
  status: Type.Optional(PetStatus),
  cursor: Cursor,
});
export type ListPetsQuery = Static<typeof ListPetsQuery>;
