import { Type, type Static } from '@sinclair/typebox';
import { Id, Literals } from '../platform/schemas/common.js';
import { UsagePage, UsageRange } from './schemas.js';

export const UsageQuery = Type.Object({
  customerId: Type.Optional(Type.Integer({ ...Id, description: "The customer whose keys' usage is read, all of them together; or keyId" })),
  keyId: Type.Optional(Type.Integer({ ...Id, description: 'The key whose usage is read; or customerId' })),
  ...UsageRange,
  groupBy: Type.Optional(Literals(['key', 'operation'], 'A row per key or per operation in each bucket, instead of one for all')),
  ...UsagePage(' (not with CSV, which streams the whole range)'),
});
export type UsageQuery = Static<typeof UsageQuery>;
