// @pet-store/client: the pet store API's official client (README.md beside this folder).
export {
  PetStoreClient,
  type CallOptions,
  type CreateOptions,
  type ListOptions,
  type Operation,
  type Page,
  type PetStoreClientOptions,
  type RequestEvent,
  type ResponseEvent,
  type RetryEvent,
  type RetryOptions,
  type UsageOptions,
} from './client.js';
export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  NotFoundError,
  PermissionDeniedError,
  PetStoreError,
  RateLimitError,
  ServerError,
  TimeoutError,
  type ClientErrorCode,
  type PetStoreErrorDetails,
} from './errors.js';
export type { DeprecationNotice, RateLimit } from './headers.js';
export type { NewPet, Pet, PetStatus, RateLimitStatus, ServiceErrorCode, UsageRow } from './types.js';
export { VERSION } from './version.js';
