import t from 'tap';
import Stripe from 'stripe';
import {
  computeSignature,
  generateSecret,
  secretPreview,
  signatureHeader,
  signedHeaders,
  verifySignature,
} from '../../webhooks/Signature.ts';

const stripe = new Stripe('sk_test_dummy'); // webhooks.* never touches the network
const body = JSON.stringify({ id: 'evt_abc', type: 'stream.ended', created_at: '2026-03-01T00:00:00.000Z', data: { stream_id: 'str_1' } });

void t.test('our header equals stripe-node generateTestHeaderString byte for byte', { timeout: 10_000 }, async (t) => {
  for (let i = 0; i < 20; i++) {
    const secret = generateSecret();
    const ts = 1_700_000_000 + i * 7919;
    t.equal(signatureHeader(body, secret, ts), stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: ts }));
  }
});

void t.test('stripe constructEvent verifies a header we signed now', { timeout: 10_000 }, async (t) => {
  const secret = generateSecret();
  const headers = signedHeaders({ eventId: 'evt_abc', eventType: 'stream.ended', payload: body, secret, nowMs: Date.now() });
  const header = headers['reverie-webhook-signature'] as string;
  const event = stripe.webhooks.constructEvent(body, header, secret) as unknown as { id: string };
  t.equal(event.id, 'evt_abc');
  t.match(header, /^t=\d+,v1=[0-9a-f]{64}$/, 'no spaces, lowercase hex');
  t.equal(headers['reverie-webhook-timestamp'], header.slice(2, header.indexOf(',')), 'timestamp header equals t');
  t.equal(headers['reverie-webhook-id'], 'evt_abc');
  t.equal(headers['reverie-webhook-event'], 'stream.ended');
});

void t.test('stripe rejects a tampered body, a wrong secret, an old timestamp and a spaced header', { timeout: 10_000 }, async (t) => {
  const secret = generateSecret();
  const now = Math.floor(Date.now() / 1000);
  const header = signatureHeader(body, secret, now);
  t.throws(() => stripe.webhooks.constructEvent(body.replace('str_1', 'str_2'), header, secret), /No signatures found/);
  t.throws(() => stripe.webhooks.constructEvent(body, header, generateSecret()), /No signatures found/);
  const old = signatureHeader(body, secret, now - 301);
  t.throws(() => stripe.webhooks.constructEvent(body, old, secret), /tolerance/);
  t.throws(() => stripe.webhooks.constructEvent(body, header.replace(',', ', '), secret));
  // Our own verifier agrees.
  t.ok(verifySignature(body, header, secret));
  t.notOk(verifySignature(body + ' ', header, secret));
  t.notOk(verifySignature(body, header, generateSecret()));
  t.notOk(verifySignature(body, old, secret));
  t.notOk(verifySignature(body, header.replace('v1=', 'v0='), secret), 'v0 only is not accepted');
});

void t.test('the HMAC key is the whole whsec_ string, not its decoded bytes', { timeout: 10_000 }, async (t) => {
  const secret = generateSecret();
  const decoded = Buffer.from(secret.slice(6), 'base64').toString('latin1');
  t.not(computeSignature(body, secret, 1), computeSignature(body, decoded, 1));
});

void t.test('secrets are whsec_ + base64 of 24 random bytes; the preview shows 4+4 characters', { timeout: 10_000 }, async (t) => {
  const a = generateSecret();
  const b = generateSecret();
  t.match(a, /^whsec_[A-Za-z0-9+/]{32}$/);
  t.equal(Buffer.from(a.slice(6), 'base64').length, 24);
  t.not(a, b);
  const p = secretPreview(a);
  t.equal(p, `whsec_${a.slice(6, 10)}…${a.slice(-4)}`);
  t.notOk(p.includes(a.slice(10, 34)), 'the middle is hidden');
});
