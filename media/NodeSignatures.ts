/**
 * Headers one process of a deployment puts on a WHIP/WHEP request to a media node, signed with the
 * deployment's shared secret (HMAC-SHA256, derived from LINK_SIGNING_SECRET): the node trusts what
 * they say only with a valid signature.
 *
 * - `x-reverie-forwarded: <client address>;<sig>`: an api replica forwarded the request for that
 *   client (the node's per-client limits and admission rule see the client, not the replica).
 * - `x-reverie-edge: <edge node URL>;<sig>`: an edge node pulls the stream to relay it to its own
 *   viewers (decision 0030). The origin takes it as one viewer session, outside the per-client
 *   limits and the admission rule: the edge's viewers were admitted on the edge.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

/** Header an api replica puts on a forwarded WHIP/WHEP POST: `<client address>;<signature>`. */
export const FORWARDED_HEADER = 'x-reverie-forwarded';
/** Header of an edge node's pull from the origin: `<edge node URL>;<signature>`. */
export const EDGE_HEADER = 'x-reverie-edge';

function signed(purpose: string, value: string, secret: string): string {
  return `${value};${createHmac('sha256', secret).update(`${purpose}:${value}`).digest('hex').slice(0, 32)}`;
}

/** The value of `header` when it carries a valid signature for `purpose`, else null. */
function verified(req: FastifyRequest, header: string, purpose: string, secret: string | undefined): string | null {
  const given = req.headers[header];
  if (!secret || typeof given !== 'string') return null;
  const value = given.slice(0, given.lastIndexOf(';'));
  const expected = Buffer.from(signed(purpose, value, secret));
  const got = Buffer.from(given);
  return expected.length === got.length && timingSafeEqual(expected, got) ? value : null;
}

/** The signed value of FORWARDED_HEADER for `address`. */
export function forwardedFor(address: string, secret: string): string {
  return signed('forwarded', address, secret);
}

/** The client's address: the one an api replica signed for, else the TCP peer's. */
export function clientAddress(req: FastifyRequest, secret: string | undefined): string {
  return verified(req, FORWARDED_HEADER, 'forwarded', secret) ?? req.ip;
}

/** The signed value of EDGE_HEADER for the edge node at `edgeUrl`. */
export function edgePullFor(edgeUrl: string, secret: string): string {
  return signed('edge', edgeUrl, secret);
}

/** The edge node a WHEP request is a pull of (its URL), or null when it is not a signed edge pull. */
export function edgePullOf(req: FastifyRequest, secret: string | undefined): string | null {
  return verified(req, EDGE_HEADER, 'edge', secret);
}
