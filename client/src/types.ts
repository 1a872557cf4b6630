// The API's shapes, from the types generated from the document the service serves (generated/).
import type { operations } from './generated/openapi.js';

/** An animal as the service returns it. */
export type Pet = operations['getPet']['responses'][200]['content']['application/json'];
/** The body of a create: `name` and `categoryId` required; no `status` means none. */
export type NewPet = operations['createPet']['requestBody']['content']['application/json'];
export type PetStatus = NonNullable<Pet['status']>;
/** The `code` of the service's error bodies. */
export type ServiceErrorCode = operations['listPets']['responses'][400]['content']['application/json']['code'];
/**
 * GET /v1/rate_limit's answer: the key's plan, both windows, its requests in flight, its credits
 * (null without any), the operations' costs.
 */
export type RateLimitStatus = operations['getRateLimit']['responses'][200]['content']['application/json'];
/**
 * A bucket of GET /v1/usage's answer: its start (an ISO date-time string), its operation with
 * groupBy, the requests served, the units they spent and the refusals by kind.
 */
export type UsageRow = operations['getUsage']['responses'][200]['content']['application/json'][number];
