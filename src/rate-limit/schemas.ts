import { Type, type Static } from '@sinclair/typebox';

const QuotaWindow = (window: string, size: string) =>
  Type.Object(
    {
      limit: Type.Integer({ description: `Units the key may spend per ${window}` }),
      remaining: Type.Integer({ description: 'Units left in the window' }),
      used: Type.Integer({ description: 'Units spent in the window so far' }),
      reset: Type.Integer({ description: `Unix time (seconds) when the window resets (${size}), as X-RateLimit-Reset` }),
    },
    { description: `The window named ${window}, when the key has one (as in windows)` },
  );

/** One of the key's windows, by name, as GET /v1/rate_limit lists them. */
const NamedWindow = Type.Object({
  name: Type.String({ description: 'The window’s name, as RateLimit-Policy names it' }),
  limit: Type.Integer({ description: 'Units the key may spend in the window' }),
  remaining: Type.Integer({ description: 'Units left in the window' }),
  windowSeconds: Type.Integer({ description: 'The window’s length in seconds' }),
  resetAt: Type.String({
    format: 'date-time',
    description: 'When the window resets (a sliding one without room: when it next has room for a request of cost 1)',
  }),
});

/** GET /v1/rate_limit's answer: a key's standing, counting nothing of it. */
export const RateLimitStatus = Type.Object(
  {
    plan: Type.String({ description: "The key's plan (free, pro, business, enterprise, or one the operator made)" }),
    windows: Type.Array(NamedWindow, {
      description:
        "Each of the key's windows (its own, else its plan's; of a customer's key the lesser of its and its customer's), shortest first",
    }),
    minute: Type.Optional(QuotaWindow('minute', 'on the minute, UTC')),
    day: Type.Optional(QuotaWindow('day', 'at 00:00 UTC')),
    concurrency: Type.Object(
      {
        limit: Type.Union([Type.Integer(), Type.Null()], {
          description: 'Requests the key may have in flight at once; null when it has no such limit',
        }),
        inFlight: Type.Integer({ description: 'Its requests in flight now, on every instance (this one not counted)' }),
      },
      { description: 'Requests in flight: past the limit, 429 concurrency_limited' },
    ),
    credits: Type.Union(
      [
        Type.Object({
          remaining: Type.Integer({ description: 'Units left: fewer than an operation costs, and it is refused (429 credits_exhausted)' }),
          refillAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
            description: 'When the balance is next refilled (00:00 UTC of its day); null when it has no refill',
          }),
        }),
        Type.Null(),
      ],
      {
        description:
          "Prepaid credits: of the key's own balance and its customer's, the one with fewer units left, which every request spends its cost from; null when the key has none",
      },
    ),
    costs: Type.Record(Type.String(), Type.Integer(), {
      description:
        'Units each operation spends of both windows and of the prepaid credits, by operationId (1 unless the operator prices it)',
      examples: [{ listPets: 1, createPet: 5, getPet: 1 }],
    }),
  },
  {
    title: 'RateLimitStatus',
    description: "The key's plan, what is left of its windows and prepaid credits, its requests in flight, and what each operation costs",
  },
);
export type RateLimitStatus = Static<typeof RateLimitStatus>;
