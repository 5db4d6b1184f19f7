/**
 * The publisher's UDP sockets get the receive buffer asked for, as the kernel sees it (`ss`),
 * not as werift's objects say; the node's ICE consent checks wait for answers that come late;
 * werift's own NACK generation is turned off where the node asks for lost packets itself.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { RTCPeerConnection, RTCRtpCodecParameters, RtpHeader, RtpPacket } from 'werift';
import { answerWithAllCandidates, CONSENT_RESPONSE_FLOOR_MS, createPeerConnection, disableWeriftNacks, udpRecvBufferCap } from '../../../media/webrtc/PeerTransport.ts';
import { until } from '../../helpers/until.ts';

/** A sendonly H.264 offer from a second werift peer, with its candidates. */
async function offer(t: Test): Promise<string> {
  const pc = new RTCPeerConnection({ codecs: { video: [new RTCRtpCodecParameters({ mimeType: 'video/H264', clockRate: 90000, parameters: 'profile-level-id=42e01f;packetization-mode=1' })] }, iceAdditionalHostAddresses: ['127.0.0.1'] });
  t.teardown(() => pc.close());
  pc.addTransceiver('video', { direction: 'sendonly' });
  await pc.setLocalDescription(await pc.createOffer());
  if (pc.iceGatheringState !== 'complete') await pc.iceGatheringStateChange.watch((s) => s === 'complete', 10_000);
  return pc.localDescription?.sdp ?? '';
}

/** Receive buffer (bytes, as the kernel reports it) of the UDP sockets on `port`. */
function kernelRcvbuf(port: number): number[] {
  const out = execFileSync('ss', ['-u', '-a', '-m', '-n', `sport = :${port}`], { encoding: 'utf8' });
  return [...out.matchAll(/skmem:\([^)]*\brb(\d+)/g)].map((m) => Number(m[1]));
}

async function answeredPorts(t: Test, udpRecvBufferBytes: number | undefined): Promise<number[]> {
  const transport = { iceAddresses: ['127.0.0.1'], iceTcp: false, udpRecvBufferBytes };
  const pc = createPeerConnection('whip', transport);
  t.teardown(() => pc.close());
  const answer = await answerWithAllCandidates(pc, await offer(t), transport, 10_000);
  return [...answer.matchAll(/a=candidate:\S+ 1 udp \d+ \S+ (\d+) typ host/gi)].map((m) => Number(m[1]));
}

/** The system's default receive buffer, bytes (what a socket gets when nobody asks). */
const rmemDefault = Number(readFileSync('/proc/sys/net/core/rmem_default', 'utf8').trim());
/** Well above the default, so the assertion below could not pass on a socket left alone. */
const asked = Math.max(1024 * 1024, 4 * rmemDefault);

t.test('every UDP socket of a publisher session gets the receive buffer asked for (up to the kernel cap)', async (t) => {
  const cap = udpRecvBufferCap() ?? asked;
  const ports = await answeredPorts(t, asked);
  t.ok(ports.length > 0, `the answer offers UDP host candidates (${ports.join(', ')})`);
  for (const port of ports) {
    const sizes = kernelRcvbuf(port);
    t.ok(sizes.length > 0, `the kernel lists the socket on port ${port}`);
    // Linux grants min(asked, rmem_max) and reports twice that (bookkeeping overhead).
    t.ok(sizes.every((rb) => rb >= Math.min(asked, cap)), `port ${port}: receive buffer ${sizes.join(', ')} bytes ≥ ${Math.min(asked, cap)}`);
  }
});

t.test('without the option the sockets keep the system default (what the option changes)', async (t) => {
  const ports = await answeredPorts(t, undefined);
  const sizes = ports.flatMap(kernelRcvbuf);
  t.ok(sizes.length > 0, 'the kernel lists the sockets');
  // Linux reports twice what it grants.
  t.ok(sizes.every((rb) => rb <= 2 * rmemDefault), `receive buffers ${sizes.join(', ')} bytes: the default (${rmemDefault} granted), below the ${asked} asked above`);
});

/** werift's ICE internals the consent test reads (not part of its typed API). */
interface IceInternals {
  state: string;
  nominated?: { consentRequestsSent: number; responsesReceived: number; rtt?: number };
  protocols: { sendStun(message: { messageClass: number }, addr: unknown): Promise<void> }[];
}
const iceOf = (pc: RTCPeerConnection) => pc.iceTransports[0]?.connection as unknown as IceInternals;

t.test("the node's consent checks wait for answers read late (a busy JS thread reads them after werift's 500 ms)", { timeout: 60_000 }, async (t) => {
  const remote = new RTCPeerConnection({ codecs: { video: [new RTCRtpCodecParameters({ mimeType: 'video/H264', clockRate: 90000, parameters: 'profile-level-id=42e01f;packetization-mode=1' })] }, iceAdditionalHostAddresses: ['127.0.0.1'] });
  t.teardown(() => remote.close());
  remote.addTransceiver('video', { direction: 'sendonly' });
  await remote.setLocalDescription(await remote.createOffer());
  if (remote.iceGatheringState !== 'complete') await remote.iceGatheringStateChange.watch((s) => s === 'complete', 10_000);
  const transport = { iceAddresses: ['127.0.0.1'], iceTcp: false };
  const pc = createPeerConnection('whip', transport);
  t.teardown(() => pc.close());
  const answer = await answerWithAllCandidates(pc, remote.localDescription?.sdp ?? '', transport, 10_000);
  await remote.setRemoteDescription({ type: 'answer', sdp: answer });
  await until('connected', async () => pc.connectionState, (s) => s === 'connected', 15_000);
  // From now on the publisher's STUN answers leave 1.5 s late: what the node sees when its JS
  // thread reads them 1.5 s after they arrived.
  const lateMs = 1_500;
  for (const p of iceOf(remote).protocols) {
    const send = p.sendStun.bind(p);
    p.sendStun = (message, addr) => (message.messageClass === 256 ? new Promise((r) => setTimeout(r, lateMs)).then(() => send(message, addr)) : send(message, addr));
  }
  const ice = iceOf(pc);
  const before = { sent: ice.nominated?.consentRequestsSent ?? 0, answered: ice.nominated?.responsesReceived ?? 0 };
  // Consent checks go every 4–6 s; two of them, each answered late.
  const after = await until(
    'two late consent answers counted',
    async () => ({ sent: ice.nominated?.consentRequestsSent ?? 0, answered: ice.nominated?.responsesReceived ?? 0, rtt: ice.nominated?.rtt ?? 0 }),
    (n) => n.sent - before.sent >= 2 && n.answered - before.answered >= 2,
    20_000,
  );
  t.ok(after.answered - before.answered >= 2, `consent checks answered ${lateMs} ms late still count (${after.answered - before.answered} of ${after.sent - before.sent} sent)`);
  t.ok((after.rtt ?? 0) * 1000 >= lateMs, `the round trip werift measured is the late one (${Math.round((after.rtt ?? 0) * 1000)} ms)`);
  t.ok(lateMs < CONSENT_RESPONSE_FLOOR_MS, `an answer up to ${CONSENT_RESPONSE_FLOOR_MS} ms late counts`);
  t.equal(ice.state, 'connected', 'the session stays connected');
});

t.test("werift's receiver NACK handler is turned off: a gap in the video leaves it nothing to ask for", async (t) => {
  /** Feeds the video receiver's NACK handler packets 1, 2 and 5 and returns what it would NACK. */
  const gapsSeen = async (disable: boolean): Promise<number[]> => {
    const transport = { iceAddresses: ['127.0.0.1'], iceTcp: false };
    const pc = createPeerConnection('whip', transport);
    t.teardown(() => pc.close());
    await answerWithAllCandidates(pc, await offer(t), transport, 10_000);
    if (disable) disableWeriftNacks(pc);
    const receiver = pc.getTransceivers().find((x) => x.kind === 'video')?.receiver;
    // The handler is werift's (private in its types): the seam's target, read as the seam reads it.
    const nack = (receiver as unknown as { nack: { addPacket(p: RtpPacket): void; lostSeqNumbers: number[]; close(): void } }).nack;
    for (const seq of [1, 2, 5]) nack.addPacket(new RtpPacket(new RtpHeader({ sequenceNumber: seq, ssrc: 1234, payloadType: 96 }), Buffer.alloc(10)));
    const lost = [...nack.lostSeqNumbers];
    nack.close();
    return lost;
  };
  t.same(await gapsSeen(false), [3, 4], 'left alone, werift would NACK 3 and 4 (the seam reaches the live handler)');
  t.same(await gapsSeen(true), [], 'turned off, it tracks nothing and sends nothing');
});
