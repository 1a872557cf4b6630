import { Type } from '@sinclair/typebox';

// The usage record's setting, its description the setting's documentation (src/config/schema.ts).

/** How long the usage record (docs/admin-api.md, "Usage") is kept. */
export const usage = {
  USAGE_RETENTION_DAYS: Type.Integer({
    minimum: 0,
    default: 400,
    description:
      'Days the usage record keeps each hour of usage (`GET /admin/v1/usage`); older hours are deleted by the instances. ' +
      '`0` keeps no usage record at all: nothing is recorded, and the hours recorded before are deleted.',
  }),
};
