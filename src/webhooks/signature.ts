import { createHmac } from 'node:crypto';

/** The header a receiver checks each event with. */
export const SIGNATURE_HEADER = 'pet-store-signature';
/** The event's id, as in the body: a receiver may drop a repeat before parsing it. */
export const EVENT_ID_HEADER = 'pet-store-event-id';

/**
 * Stripe's scheme: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. The time is signed
 * with the body, so a receiver that refuses old times refuses a replayed event.
 */
export function signature(secret: string, body: string, unixSeconds: number): string {
  const digest = createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex');
  return `t=${unixSeconds},v1=${digest}`;
}
