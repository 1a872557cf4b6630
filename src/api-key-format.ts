import { createHash, randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * API keys: `psk_`, 43 random base62 characters (256 bits) and 6 base62 characters of the CRC32
 * of those, as GitHub's tokens carry theirs. A mistyped or made-up key is refused without any
 * lookup, and secret scanners can match `psk_[0-9A-Za-z]{49}` and verify the checksum. Keys
 * issued before the checksum (`psk_` and 43 base64url characters) are still accepted.
 */
const PREFIX = 'psk_';
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const RANDOM_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const CHECKSUMMED = /^psk_[0-9A-Za-z]{49}$/;
const LEGACY = /^psk_[A-Za-z0-9_-]{43}$/;

function base62(value: number, length: number): string {
  let text = '';
  for (let rest = value; text.length < length; rest = Math.floor(rest / 62)) text = BASE62[rest % 62]! + text;
  return text;
}

const checksumOf = (random: string) => base62(crc32(random), CHECKSUM_LENGTH);

export function generateKey(): string {
  let random = '';
  while (random.length < RANDOM_LENGTH) random += BASE62[randomInt(62)];
  return PREFIX + random + checksumOf(random);
}

/** Whether a presented key can be one of ours: its shape, and its checksum when it has one. */
export function isPlausibleKey(key: string): boolean {
  if (CHECKSUMMED.test(key)) {
    const random = key.slice(PREFIX.length, PREFIX.length + RANDOM_LENGTH);
    return key.slice(PREFIX.length + RANDOM_LENGTH) === checksumOf(random);
  }
  return LEGACY.test(key);
}

/** Keys are looked up, stored and compared only as their SHA-256 hash. */
export const hashKey = (key: string) => createHash('sha256').update(key).digest();
