/**
 * werift's DTLS handshake over links that reorder and drop: the order object on records built
 * here (unit), and an OBS-like publisher (libdatachannel: OpenSSL is the DTLS server, werift the
 * client) connecting to a real node through a relay that delays, reorders and drops
 * (test/helpers/impairedPublish.ts). The 20-attempt version: test/load/dtlsHandshake.load.ts.
 */
import t from 'tap';
import { DATAGRAM_BUDGET_BYTES, DtlsHandshakeOrder } from '../../../media/webrtc/DtlsHandshakeOrder.ts';
import { impairedLink } from '../../helpers/impairedPublish.ts';

/** One DTLS record: content type, DTLS 1.2, epoch, record sequence number, body. */
function record(type: number, epoch: number, seq: number, body: Buffer): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt8(type, 0);
  header.writeUInt16BE(0xfefd, 1);
  header.writeUInt16BE(epoch, 3);
  header.writeUIntBE(seq, 5, 6);
  header.writeUInt16BE(body.length, 11);
  return Buffer.concat([header, body]);
}

/** A handshake fragment: message type, message_seq, the message's body and the piece [offset, offset+length). */
function fragment(msgType: number, messageSeq: number, body: Buffer, offset = 0, length = body.length): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt8(msgType, 0);
  h.writeUIntBE(body.length, 1, 3);
  h.writeUInt16BE(messageSeq, 4);
  h.writeUIntBE(offset, 6, 3);
  h.writeUIntBE(length, 9, 3);
  return Buffer.concat([h, body.subarray(offset, offset + length)]);
}

/** What werift was given: per datagram, each record's (type, message type, message_seq, body) for handshake records. */
function read(datagrams: Buffer[]): { type: number; epoch: number; msgType?: number; seq?: number; offset?: number; body: Buffer }[] {
  return datagrams.map((d) => {
    const type = d.readUInt8(0);
    const epoch = d.readUInt16BE(3);
    const body = d.subarray(13, 13 + d.readUInt16BE(11));
    if (type !== 22 || epoch !== 0) return { type, epoch, body };
    return { type, epoch, msgType: body.readUInt8(0), seq: body.readUInt16BE(4), offset: body.readUIntBE(6, 3), body: body.subarray(12, 12 + body.readUIntBE(9, 3)) };
  });
}

function harness(state = { done: false, keys: false }) {
  const delivered: Buffer[] = [];
  const sent: Buffer[] = [];
  const order = new DtlsHandshakeOrder({
    deliver: (d) => delivered.push(d),
    send: async (d) => {
      sent.push(d);
    },
    handshakeDone: () => state.done,
    hasKeys: () => state.keys,
    // Stands in for werift's AES-GCM: the record under its new number, its body marked.
    reseal: (r, seq) => {
      const out = Buffer.from(r);
      out.writeUIntBE(seq, 5, 6);
      out.writeUInt8(0x5e, 13);
      return out;
    },
  });
  return { order, delivered, sent, state };
}

const body = (n: number, fill: number) => Buffer.alloc(n, fill);

t.test('handshake messages reach werift in message_seq order, each once whole, whatever order the records came in', async (t) => {
  const { order, delivered } = harness();
  const hello = body(90, 2);
  const cert = body(300, 11);
  // ServerHelloDone (seq 4) first, then CertificateRequest (3), ServerKeyExchange (2), Certificate in two pieces, ServerHello last.
  order.incoming(record(22, 0, 4, fragment(14, 4, Buffer.alloc(0))));
  order.incoming(record(22, 0, 3, fragment(13, 3, body(54, 13))));
  order.incoming(record(22, 0, 2, fragment(12, 2, body(145, 12))));
  order.incoming(record(22, 0, 5, fragment(11, 1, cert, 200, 100)));
  t.equal(delivered.length, 0, 'nothing reaches werift while the first message is missing');
  order.incoming(record(22, 0, 1, fragment(11, 1, cert, 0, 200)));
  t.equal(delivered.length, 0, 'a whole Certificate is still held behind the ServerHello');
  order.incoming(record(22, 0, 0, fragment(2, 0, hello)));
  const got = read(delivered);
  t.same(got.map((r) => [r.msgType, r.seq, r.offset]), [[2, 0, 0], [11, 1, 0], [12, 2, 0], [13, 3, 0], [14, 4, 0]], 'ServerHello, Certificate, ServerKeyExchange, CertificateRequest, ServerHelloDone');
  t.ok(got[1]?.body.equals(cert), 'the Certificate is joined from its two pieces');
  t.ok(got[0]?.body.equals(hello), 'the ServerHello is as sent');
  t.same(order.stats(), { reordered: 4, reassembled: 1, heldEncrypted: 0, packed: 0, resequenced: 0 }, 'counted');

  // A retransmitted whole message goes on (werift answers it by resending its last flight); a piece of one does not.
  order.incoming(record(22, 0, 9, fragment(14, 4, Buffer.alloc(0))));
  order.incoming(record(22, 0, 10, fragment(11, 1, cert, 0, 200)));
  t.same(read(delivered.slice(5)).map((r) => [r.msgType, r.seq]), [[14, 4]], 'a whole retransmission passes, a piece of one is dropped');
});

t.test('several records of one datagram are taken one by one; encrypted records wait for werift\'s keys', async (t) => {
  const { order, delivered, state } = harness();
  const finished = record(22, 1, 0, body(48, 0xee));
  const ccs = record(20, 0, 7, Buffer.from([1]));
  order.incoming(Buffer.concat([finished, ccs, record(22, 0, 0, fragment(2, 0, body(10, 2)))]));
  const got = read(delivered);
  t.same(got.map((r) => [r.type, r.epoch]), [[20, 0], [22, 0]], 'ChangeCipherSpec and the ServerHello pass; the Finished waits');
  state.keys = true;
  order.incoming(record(22, 0, 1, fragment(11, 1, body(5, 1))));
  t.ok(delivered.at(-1)?.equals(finished), 'with werift holding keys, the Finished follows the next message, unchanged');
  t.equal(order.stats().heldEncrypted, 1, 'counted');
});

t.test('what is not a whole DTLS record, and everything after the handshake, passes as it came', async (t) => {
  const { order, delivered, state } = harness();
  const junk = Buffer.from([22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x00, 1, 2]);
  order.incoming(junk);
  t.ok(delivered[0]?.equals(junk), 'a truncated record goes to werift as it is');
  state.done = true;
  const late = record(22, 0, 3, fragment(14, 9, Buffer.alloc(0)));
  order.incoming(late);
  t.ok(delivered[1]?.equals(late), 'after the handshake a record ahead of sequence passes at once');
});

t.test('a flight leaves packed in as few datagrams as fit the budget, in order; after the handshake each send leaves alone', async (t) => {
  const { order, sent, state } = harness();
  const flight = [record(22, 0, 1, body(400, 1)), record(22, 0, 2, body(70, 2)), record(22, 0, 3, body(80, 3)), record(20, 0, 4, Buffer.from([1])), record(22, 1, 0, body(48, 5))];
  await Promise.all(flight.map((r) => order.outgoing(r)));
  t.equal(sent.length, 1, 'one datagram for the flight');
  t.ok(sent[0]?.equals(Buffer.concat(flight)), 'the records in the order werift sent them');
  t.equal(order.stats().packed, 1, 'counted');

  sent.length = 0;
  const big = [record(22, 0, 5, body(700, 6)), record(22, 0, 6, body(700, 7)), record(22, 0, 7, body(10, 8))];
  await Promise.all(big.map((r) => order.outgoing(r)));
  t.same(sent.map((d) => d.length), [big[0]?.length, (big[1]?.length ?? 0) + (big[2]?.length ?? 0)], 'split at record boundaries');
  t.ok(sent.every((d) => d.length <= DATAGRAM_BUDGET_BYTES), `every datagram within ${DATAGRAM_BUDGET_BYTES} bytes`);

  sent.length = 0;
  state.done = true;
  await Promise.all([order.outgoing(record(23, 1, 1, body(20, 9))), order.outgoing(record(23, 1, 2, body(20, 9)))]);
  t.equal(sent.length, 2, 'application data after the handshake: one datagram per send, as werift sends it');
});

t.test('a flight werift sends again leaves under record sequence numbers not used before (a receiver drops repeats as replays)', async (t) => {
  const { order, sent } = harness();
  const seqs = (d: Buffer | undefined) => {
    const out: [number, number][] = [];
    for (let at = 0; d && at < d.length; at += 13 + d.readUInt16BE(at + 11)) out.push([d.readUInt16BE(at + 3), d.readUIntBE(at + 5, 6)]);
    return out;
  };
  const flight = [record(22, 0, 2, body(400, 1)), record(22, 0, 3, body(70, 2)), record(20, 0, 4, Buffer.from([1])), record(22, 1, 6, body(48, 5))];
  await Promise.all(flight.map((r) => order.outgoing(r)));
  await Promise.all(flight.map((r) => order.outgoing(r)));
  await Promise.all(flight.map((r) => order.outgoing(r)));
  t.same(seqs(sent[0]), [[0, 2], [0, 3], [0, 4], [1, 6]], 'first: as werift numbered them');
  t.same(seqs(sent[1]), [[0, 5], [0, 6], [0, 7], [1, 7]], 'again: each epoch counts on');
  t.same(seqs(sent[2]), [[0, 8], [0, 9], [0, 10], [1, 8]], 'and again');
  t.equal(sent[1]?.readUInt8(13 + 400 + (13 + 70) + (13 + 1) + 13), 0x5e, 'the encrypted record is sealed again, not renumbered in place');
  t.ok(sent[1]?.subarray(13, 13 + 400).equals(body(400, 1)), 'plaintext records keep their bodies');
  t.equal(order.stats().resequenced, 8, 'counted');
});

/** Attempts per link in the main suite (the load suite makes 20). */
const ATTEMPTS = 5;
/** Per attempt: WHIP answer to the node's first media, ms. OBS waits as long for nothing; the node gives up on a silent session after 10 s. */
const LIMIT_MS = 10_000;

t.test(`an OBS-like publisher connects on the first try over 3 % loss and ±10 ms jitter that reorders, and over 150 ms RTT (${ATTEMPTS} attempts each)`, { timeout: 240_000 }, async (t) => {
  const lossy = { delayMs: 40, jitterMs: 10, lossPct: 3 };
  const link = await impairedLink(t, lossy, lossy);
  const runs: Record<string, { connected: number; ms: number[]; failed: string[] }> = {};
  for (const [name, imp] of [
    ['40 ± 10 ms each way, 3 % loss', lossy],
    ['75 ± 10 ms each way (150 ms RTT), 3 % loss', { delayMs: 75, jitterMs: 10, lossPct: 3 }],
  ] as const) {
    link.set(imp, imp);
    const r = { connected: 0, ms: [] as number[], failed: [] as string[] };
    for (let i = 0; i < ATTEMPTS; i++) {
      const a = await link.attempt(LIMIT_MS);
      if (a.connected) r.connected++;
      else r.failed.push(`attempt ${i}: ${a.state}`);
      r.ms.push(a.ms);
    }
    runs[name] = r;
    t.equal(r.connected, ATTEMPTS, `${name}: ${r.connected} of ${ATTEMPTS} connected on the first try (ms to media: ${r.ms.join(', ')}${r.failed.length ? `; ${r.failed.join('; ')}` : ''})`);
  }
  const reordered = link.relays.reduce((n, r) => n + r.stats().up.reordered + r.stats().down.reordered, 0);
  t.ok(reordered > 0, `the link reordered packets (${reordered})`);
});
