import { Type, type Static } from '@sinclair/typebox';
import { Nullable, Timestamp } from '../../platform/schemas/common.js';

/** Which store an admin read of the limiter was answered from. */
const Source = Type.Union([Type.Literal('redis'), Type.Literal('memory')], {
  description: "The store that answered: redis, or this instance's memory (no Redis configured, or during a Redis outage)",
});

const UsageWindow = Type.Object({
  limit: Type.Integer(),
  used: Type.Integer({ description: 'Units counted in the window so far (of a sliding window, with the previous window’s share)' }),
  resetAt: Timestamp,
});

const NamedUsageWindow = Type.Object({
  name: Type.String(),
  windowSeconds: Type.Integer(),
  ...UsageWindow.properties,
});

export const KeyUsage = Type.Object(
  {
    windows: Type.Array(NamedUsageWindow, { description: "Each of the key's windows (its own, else its plan's), shortest first" }),
    minute: Type.Optional({ ...UsageWindow, description: 'The window named minute, when the key has one' }),
    day: Type.Optional({ ...UsageWindow, description: 'The window named day, when the key has one' }),
    bannedUntil: Nullable({ ...Timestamp, description: 'When the ban ends; null when not banned' }),
    source: Source,
  },
  { title: 'KeyUsage', description: "What the key's quota holds now, read from the limiter's own store; counts nothing" },
);
export type KeyUsage = Static<typeof KeyUsage>;

export const AddressBans = Type.Object(
  {
    bans: Type.Array(
      Type.Object({
        address: Type.String({ description: 'An IPv4 address, or an IPv6 network of RATE_LIMIT_IPV6_PREFIX bits (`2001:db8:1:2::/64`)' }),
        bannedUntil: { ...Timestamp, description: 'When the ban ends' },
      }),
    ),
    source: Source,
  },
  { title: 'AddressBans', description: "The client addresses banned now, in address order, read from the limiter's own store" },
);

export const AddressParams = Type.Object({
  address: Type.String({
    maxLength: 100,
    description: 'An address of the client (any address of its IPv6 network will do), or the client as the list names it',
  }),
});
