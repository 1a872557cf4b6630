import ipaddr from 'ipaddr.js';

/**
 * The client an address counts as: an IPv4 address as itself, however it is written (an
 * IPv4-mapped IPv6 form is the same host), and an IPv6 address by its first `ipv6Prefix` bits,
 * since one subscriber is routinely handed a whole /64 and could otherwise start afresh from
 * each of its addresses. Anything that is no address (a forwarded header's garbage) counts as its text.
 */
export function clientOf(address: string, ipv6Prefix: number): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const bytes = parsed.toByteArray();
  for (let bit = ipv6Prefix; bit < 128; bit++) bytes[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return `${ipaddr.fromByteArray(bytes).toString()}/${ipv6Prefix}`;
}
