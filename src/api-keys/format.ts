import { createHash, randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * Secrets: a prefix naming what they are, 43 random base62 characters (256 bits) and 6 base62
 * characters of the CRC32 of those, as GitHub's tokens carry theirs. A mistyped or made-up secret
 * is refused without any lookup, and secret scanners can match the prefix and verify the
 * checksum. API keys are `psk_`; admin tokens `psa_`, so a scanner (and the service) tells them
 * apart. API keys issued before the checksum (`psk_` and 43 base64url characters) are still accepted.
 */
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const RANDOM_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const LEGACY = /^psk_[A-Za-z0-9_-]{43}$/;

function base62(value: number, length: number): string {
  let text = '';
  for (let rest = value; text.length < length; rest = Math.floor(rest / 62)) text = BASE62[rest % 62]! + text;
  return text;
}

const checksumOf = (random: string) => base62(crc32(random), CHECKSUM_LENGTH);

/** A kind of secret, told apart by its prefix. */
function secretFormat(prefix: string) {
  const checksummed = new RegExp(`^${prefix}[0-9A-Za-z]{${RANDOM_LENGTH + CHECKSUM_LENGTH}}$`);
  return {
    generate: (): string => {
      let random = '';
      while (random.length < RANDOM_LENGTH) random += BASE62[randomInt(62)];
      return prefix + random + checksumOf(random);
    },
    /** Whether a presented secret can be one of this kind: its shape and its checksum. */
    isPlausible: (secret: string): boolean => {
      if (!checksummed.test(secret)) return false;
      const random = secret.slice(prefix.length, prefix.length + RANDOM_LENGTH);
      return secret.slice(prefix.length + RANDOM_LENGTH) === checksumOf(random);
    },
  };
}

const apiKeys = secretFormat('psk_');
const adminTokens = secretFormat('psa_');

export const generateKey = apiKeys.generate;

/** Whether a presented key can be one of ours: its shape, and its checksum when it has one. */
export const isPlausibleKey = (key: string) => apiKeys.isPlausible(key) || LEGACY.test(key);

export const generateAdminToken = adminTokens.generate;
export const isPlausibleAdminToken = adminTokens.isPlausible;

/** Keys and admin tokens are looked up, stored and compared only as their SHA-256 hash. */
export const hashKey = (key: string) => createHash('sha256').update(key).digest();
