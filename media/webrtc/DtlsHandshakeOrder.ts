/**
 * The records of a DTLS 1.2 handshake as werift can take them, whatever order the network gave
 * them in: werift's DTLS (the node's side of every WHIP publisher) reads each handshake record the
 * moment it arrives and sends each record of a flight in a datagram of its own, and neither
 * survives a link that reorders (decision 0022).
 *
 * - Outgoing: the records werift sends in one turn of the event loop (one flight) leave packed in
 *   as few datagrams as fit `DATAGRAM_BUDGET_BYTES`, in order. A flight then arrives whole and in
 *   order or not at all. Sent one record per datagram, reordering let the publisher's OpenSSL see
 *   werift's ChangeCipherSpec before the handshake messages it follows; OpenSSL drops such a
 *   ChangeCipherSpec (RFC 6347 §4.1: it has no message_seq to be held by) and, because werift
 *   retransmits the very same bytes with the same record sequence numbers, drops every
 *   retransmission as a replay (§4.1.2.6): the handshake never completes.
 * - Incoming: handshake messages (epoch 0) reach werift once each is whole (fragments joined) and
 *   every message before it (RFC 6347 §4.2.2 message_seq) has reached it; encrypted records
 *   (epoch ≥ 1, the peer's Finished) wait until werift holds the keys to read them. werift
 *   otherwise acts on what it has: a ServerHelloDone read before a late CertificateRequest made
 *   it answer without the certificate OpenSSL requires, and its own reassembly of fragments only
 *   works when they come in order.
 *
 * Once werift reports the handshake done everything passes as it comes (a retransmitted flight
 * included: werift answers it by resending its last one). What this cannot parse, or would have to
 * hold beyond its bounds, also passes as it comes: werift then behaves as it did without it.
 */

/** Most bytes of records packed into one datagram: fits the IPv6 minimum MTU (1280) less IP/UDP headers. */
export const DATAGRAM_BUDGET_BYTES = 1200;
/** Handshake messages held ahead of the next expected one, at most (a DTLS 1.2 flight has ≤ 6). */
const WINDOW_MESSAGES = 16;
/** Longest handshake message reassembled, bytes (a certificate chain; DTLS-SRTP ones are < 2 KiB). */
const MAX_MESSAGE_BYTES = 64 * 1024;
/** Encrypted records held until werift has keys, at most (a flight holds one: Finished). */
const MAX_HELD_RECORDS = 16;

const RECORD_HEADER = 13;
const HANDSHAKE_HEADER = 12;
const CONTENT_HANDSHAKE = 22;

export interface DtlsHandshakeOrderOptions {
  /** Hands werift one datagram (werift's own receive function). */
  deliver(datagram: Buffer): void;
  /** Sends one datagram to the peer. */
  send(datagram: Buffer): Promise<void>;
  /** Whether werift has completed the handshake (from then on everything passes as it comes). */
  handshakeDone(): boolean;
  /** Whether werift holds the keys to read encrypted (epoch ≥ 1) records. */
  hasKeys(): boolean;
  /**
   * The encrypted (epoch ≥ 1) record `record` sealed again under record sequence number `seq`
   * (its AEAD nonce and additional data cover the number); null where that cannot be done.
   */
  reseal(record: Buffer, seq: number): Buffer | null;
}

export interface DtlsHandshakeOrderStats {
  /** Incoming handshake messages that arrived before one before them. */
  reordered: number;
  /** Incoming handshake messages joined from more than one fragment. */
  reassembled: number;
  /** Incoming encrypted records that waited for werift's keys. */
  heldEncrypted: number;
  /** Outgoing datagrams that carried more than one record. */
  packed: number;
  /** Outgoing records werift sent again under a record sequence number it had used: sent under a new one. */
  resequenced: number;
}

interface Message {
  type: number;
  length: number;
  body: Buffer;
  /** One byte per byte of body: 1 once received. */
  have: Uint8Array;
  missing: number;
  fragments: number;
  /** The record header of its first fragment (version and epoch reused when it is delivered). */
  header: Buffer;
}

/** Splits a datagram into records; null if it is not a sequence of whole DTLS records. */
function records(datagram: Buffer): Buffer[] | null {
  const out: Buffer[] = [];
  let at = 0;
  while (at < datagram.length) {
    if (at + RECORD_HEADER > datagram.length) return null;
    const end = at + RECORD_HEADER + datagram.readUInt16BE(at + 11);
    if (end > datagram.length) return null;
    out.push(datagram.subarray(at, end));
    at = end;
  }
  return out;
}

function epochOf(record: Buffer): number {
  return record.readUInt16BE(3);
}

/** One record holding `fragment` (a handshake header and body) with `header`'s type, version and epoch. */
function recordOf(header: Buffer, fragment: Buffer): Buffer {
  const out = Buffer.alloc(RECORD_HEADER + fragment.length);
  header.copy(out, 0, 0, 11);
  out.writeUInt16BE(fragment.length, 11);
  fragment.copy(out, RECORD_HEADER);
  return out;
}

export class DtlsHandshakeOrder {
  readonly #opts: DtlsHandshakeOrderOptions;
  /** message_seq of the next handshake message werift is given. */
  #next = 0;
  readonly #pending = new Map<number, Message>();
  #held: Buffer[] = [];
  #outgoing: Buffer[] = [];
  #flush: Promise<void> | null = null;
  /** Highest record sequence number sent, per epoch. */
  readonly #sentSeq = new Map<number, number>();
  readonly #stats: DtlsHandshakeOrderStats = { reordered: 0, reassembled: 0, heldEncrypted: 0, packed: 0, resequenced: 0 };

  constructor(opts: DtlsHandshakeOrderOptions) {
    this.#opts = opts;
  }

  stats(): DtlsHandshakeOrderStats {
    return { ...this.#stats };
  }

  /** A datagram from the peer. */
  incoming(datagram: Buffer): void {
    if (this.#opts.handshakeDone()) {
      this.#release();
      this.#opts.deliver(datagram);
      return;
    }
    const recs = records(datagram);
    if (!recs) {
      this.#opts.deliver(datagram);
      return;
    }
    for (const record of recs) {
      const epoch = epochOf(record);
      if (record[0] === CONTENT_HANDSHAKE && epoch === 0) this.#handshake(record);
      else if (epoch > 0 && !this.#opts.hasKeys() && this.#held.length < MAX_HELD_RECORDS) {
        this.#held.push(record);
        this.#stats.heldEncrypted++;
      } else this.#opts.deliver(record);
    }
    this.#release();
  }

  /** A datagram werift sends: packed with the rest of its flight while the handshake runs. */
  outgoing(datagram: Buffer): Promise<void> {
    if (this.#opts.handshakeDone() && this.#outgoing.length === 0) return this.#opts.send(datagram);
    this.#outgoing.push(datagram);
    // werift sends a flight's records one after another in one synchronous loop: a microtask runs after the last.
    this.#flush ??= Promise.resolve().then(() => this.#sendFlight());
    return this.#flush;
  }

  async #sendFlight(): Promise<void> {
    const queued = this.#outgoing.flatMap((d) => records(d)?.map((r) => this.#fresh(r)) ?? [d]);
    this.#outgoing = [];
    this.#flush = null;
    const datagrams: Buffer[][] = [];
    let size = Infinity;
    for (const d of queued) {
      const last = datagrams.at(-1);
      if (last && size + d.length <= DATAGRAM_BUDGET_BYTES) {
        last.push(d);
        size += d.length;
      } else {
        datagrams.push([d]);
        size = d.length;
      }
    }
    await Promise.all(
      datagrams.map((parts) => {
        if (parts.length > 1) this.#stats.packed++;
        return this.#opts.send(parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts));
      }),
    );
  }

  /**
   * `record`, under a record sequence number not sent before in its epoch: werift retransmits a
   * flight as the very bytes it first sent, and a receiver that saw them drops them all as replays
   * (RFC 6347 §4.1.2.6; each record needs a number of its own, §4.2.4): one that had set aside the
   * first copy (OpenSSL drops a ChangeCipherSpec that comes early) or that must answer it (OpenSSL
   * resends its last flight when the peer's Finished comes again) then never does.
   */
  #fresh(record: Buffer): Buffer {
    const epoch = epochOf(record);
    const seq = record.readUIntBE(5, 6);
    const sent = this.#sentSeq.get(epoch) ?? -1;
    if (seq > sent) {
      this.#sentSeq.set(epoch, seq);
      return record;
    }
    const next = sent + 1;
    let out: Buffer | null;
    if (epoch === 0) {
      out = Buffer.from(record);
      out.writeUIntBE(next, 5, 6);
    } else out = this.#opts.reseal(record, next);
    if (!out) return record;
    this.#sentSeq.set(epoch, next);
    this.#stats.resequenced++;
    return out;
  }

  /** An epoch-0 handshake record: its fragments joined into messages, delivered in message_seq order. */
  #handshake(record: Buffer): void {
    for (let at = RECORD_HEADER; at < record.length; ) {
      const end = at + HANDSHAKE_HEADER <= record.length ? at + HANDSHAKE_HEADER + record.readUIntBE(at + 9, 3) : Infinity;
      if (end > record.length) {
        // Not a sequence of whole fragments: werift gets the rest as it came.
        this.#opts.deliver(recordOf(record, record.subarray(at)));
        break;
      }
      const fragment = record.subarray(at, end);
      at = end;
      const type = fragment.readUInt8(0);
      const length = fragment.readUIntBE(1, 3);
      const seq = fragment.readUInt16BE(4);
      const offset = fragment.readUIntBE(6, 3);
      const body = fragment.subarray(HANDSHAKE_HEADER);
      if (seq < this.#next) {
        // A retransmission of a message werift has: whole ones go on (werift answers them by
        // resending its last flight); pieces of one would only confuse werift's reassembly.
        if (offset === 0 && body.length === length) this.#opts.deliver(recordOf(record, fragment));
      } else if (seq >= this.#next + WINDOW_MESSAGES || length > MAX_MESSAGE_BYTES || offset + body.length > length) {
        this.#opts.deliver(recordOf(record, fragment));
      } else {
        if (seq > this.#next && !this.#pending.has(seq)) this.#stats.reordered++;
        this.#add(seq, type, length, offset, body, record);
      }
    }
    this.#drain();
  }

  #add(seq: number, type: number, length: number, offset: number, body: Buffer, record: Buffer): void {
    let m = this.#pending.get(seq);
    if (!m) {
      m = { type, length, body: Buffer.alloc(length), have: new Uint8Array(length), missing: length, fragments: 0, header: Buffer.from(record.subarray(0, RECORD_HEADER)) };
      this.#pending.set(seq, m);
    }
    if (m.type !== type || m.length !== length) return; // not the message begun under this seq: a stray piece
    m.fragments++;
    body.copy(m.body, offset);
    for (let i = offset; i < offset + body.length; i++) {
      if (m.have[i] === 0) {
        m.have[i] = 1;
        m.missing--;
      }
    }
  }

  /** Delivers every whole message from the next expected one on. */
  #drain(): void {
    for (let m = this.#pending.get(this.#next); m && m.missing === 0; m = this.#pending.get(this.#next)) {
      if (m.fragments > 1) this.#stats.reassembled++;
      this.#pending.delete(this.#next);
      const fragment = Buffer.alloc(HANDSHAKE_HEADER + m.length);
      fragment.writeUInt8(m.type, 0);
      fragment.writeUIntBE(m.length, 1, 3);
      fragment.writeUInt16BE(this.#next, 4);
      fragment.writeUIntBE(0, 6, 3);
      fragment.writeUIntBE(m.length, 9, 3);
      m.body.copy(fragment, HANDSHAKE_HEADER);
      this.#next++;
      this.#opts.deliver(recordOf(m.header, fragment));
    }
  }

  /** Hands werift the encrypted records it can now read. */
  #release(): void {
    if (this.#held.length === 0 || !(this.#opts.hasKeys() || this.#opts.handshakeDone())) return;
    const held = this.#held;
    this.#held = [];
    for (const record of held) this.#opts.deliver(record);
  }
}
