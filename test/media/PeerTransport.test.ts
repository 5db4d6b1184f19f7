/**
 * The publisher's UDP sockets get the receive buffer asked for, as the kernel sees it (`ss`),
 * not as werift's objects say.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { RTCPeerConnection, RTCRtpCodecParameters } from 'werift';
import { answerWithAllCandidates, createPeerConnection, udpRecvBufferCap } from '../../media/PeerTransport.ts';

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
