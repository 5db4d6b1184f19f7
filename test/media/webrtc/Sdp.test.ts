/**
 * Offer checks and rewrites done before werift sees an offer: one codec per m-line, the right
 * direction per role, and cheap limits.
 */
import t from 'tap';
import { MAX_OFFER_CANDIDATES, parseSdpFrag, prepareOffer, refuseRemoteCandidate, rewriteAnswerCandidates } from '../../../media/webrtc/Sdp.ts';

const limits = { maxBytes: 32 * 1024, maxLines: 1000 };
const session = 'v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n';
const common = `c=IN IP4 0.0.0.0\r\na=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdefghijkl\r\na=fingerprint:sha-256 ${Array.from({ length: 32 }, () => 'AB').join(':')}\r\na=setup:actpass\r\na=rtcp-mux\r\n`;
// What OBS sends: Opus 111 (mid 0), H.264 96 42e01f (mid 1), no candidates.
const OBS = `${session}m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n${common}a=mid:0\r\na=sendonly\r\na=rtpmap:111 opus/48000/2\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n${common}a=mid:1\r\na=sendonly\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 profile-level-id=42e01f;packetization-mode=1;level-asymmetry-allowed=1\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\n`;
const BROWSER_VIEWER = `${session.replace('BUNDLE 0 1', 'BUNDLE 0')}m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 104\r\n${common}a=mid:0\r\na=recvonly\r\na=rtpmap:96 VP8/90000\r\na=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96\r\na=rtpmap:102 H264/90000\r\na=fmtp:102 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r\na=rtpmap:103 H264/90000\r\na=fmtp:103 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f\r\na=rtpmap:104 H264/90000\r\na=fmtp:104 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\na=rtcp-fb:104 nack\r\na=candidate:1 1 udp 1 10.0.0.1 5000 typ host\r\n`;

t.test("accepts OBS's candidate-free H.264 offer as is", async (t) => {
  const p = prepareOffer(OBS, 'whip', limits);
  t.same(p.video, { codec: 'H264', payloadType: 96, fmtp: 'profile-level-id=42e01f;packetization-mode=1;level-asymmetry-allowed=1' });
  t.same(p.audio, { payloadType: 111 });
  t.equal(p.candidateCount, 0);
  t.equal(p.iceUfrag, 'abcd');
});

t.test('strips a=end-of-candidates from an offer that carries no candidates (werift would fail ICE)', async (t) => {
  const p = prepareOffer(OBS.replace('a=rtcp-fb:96 nack\r\n', 'a=rtcp-fb:96 nack\r\na=end-of-candidates\r\n'), 'whip', limits);
  t.notMatch(p.sdp, /end-of-candidates/);
});

t.test("a viewer's offer is cut down to the constrained-baseline packetization-mode=1 H.264 payload (preferred over VP8)", async (t) => {
  const p = prepareOffer(BROWSER_VIEWER, 'whep', limits);
  t.equal(p.video?.payloadType, 104, 'picks 42e01f pm=1 over VP8, pm=0 and High');
  t.match(p.sdp, /m=video 9 UDP\/TLS\/RTP\/SAVPF 104\r\n/);
  t.notMatch(p.sdp, /a=rtpmap:(96|97|102|103) /, 'other payloads and their rtx are gone');
  t.match(p.sdp, /a=rtcp-fb:104 nack/);
  t.equal(p.candidateCount, 1);
});

t.test('a viewer without H.264 packetization-mode=1 is cut down to VP8; one with neither is refused', async (t) => {
  const vp8Only = BROWSER_VIEWER.replace(/a=rtpmap:(102|103|104) H264/g, 'a=rtpmap:$1 VP9');
  const p = prepareOffer(vp8Only, 'whep', limits);
  t.same(p.video, { codec: 'VP8', payloadType: 96, fmtp: '' }, 'VP8 picked');
  t.match(p.sdp, /m=video 9 UDP\/TLS\/RTP\/SAVPF 96\r\n/);
  t.notMatch(p.sdp, /a=rtpmap:(97|102|103|104) /, 'other payloads and their rtx are gone');
  const pm0Only = BROWSER_VIEWER.replace(/a=rtpmap:(103|104) H264/g, 'a=rtpmap:$1 VP9');
  t.equal(prepareOffer(pm0Only, 'whep', limits).video?.codec, 'VP8', 'H.264 packetization-mode=0 does not count: VP8 instead');
  t.throws(() => prepareOffer(vp8Only.replace('a=rtpmap:96 VP8', 'a=rtpmap:96 VP9'), 'whep', limits), /neither H264 packetization-mode=1 nor VP8/, '422 when neither is offered');
});

t.test('a publisher offer keeps the offerer-preferred decodable codec', async (t) => {
  const pub = BROWSER_VIEWER.replace('a=recvonly', 'a=sendonly');
  t.equal(prepareOffer(pub, 'whip', limits).video?.codec, 'VP8');
  t.equal(prepareOffer(pub.replace('a=rtpmap:96 VP8/90000', 'a=rtpmap:96 VP9/90000'), 'whip', limits).video?.payloadType, 103, 'pm=0 H.264 is skipped');
});

t.test('rejects with the status the endpoint answers', async (t) => {
  const code = (fn: () => unknown) => {
    try {
      fn();
      return 0;
    } catch (err) {
      return (err as { httpStatus: number }).httpStatus;
    }
  };
  t.equal(code(() => prepareOffer('hello', 'whip', limits)), 400, 'not SDP');
  t.equal(code(() => prepareOffer(OBS.replace(/a=fingerprint.*\r\n/g, ''), 'whip', limits)), 400, 'no DTLS fingerprint');
  t.equal(code(() => prepareOffer(OBS, 'whep', limits)), 422, 'sendonly offer to WHEP');
  t.equal(code(() => prepareOffer(OBS.replace(/opus/, 'PCMU'), 'whip', limits)), 422, 'audio without Opus');
  t.equal(code(() => prepareOffer(`${session}m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n${common}`, 'whip', limits)), 422, 'data channel');
  t.equal(code(() => prepareOffer(OBS + 'a=x:y\r\n'.repeat(2000), 'whip', limits)), 413, 'too many lines');
  t.equal(code(() => prepareOffer(OBS, 'whip', { maxBytes: 100, maxLines: 1000 })), 413, 'too many bytes');
});

t.test('answer candidates are filtered to the configured addresses', async (t) => {
  const answer = 'v=0\r\na=candidate:1 1 udp 1 127.0.0.1 4000 typ host\r\na=candidate:2 1 udp 1 10.1.2.3 4001 typ host\r\n';
  t.equal(rewriteAnswerCandidates(answer, { interfaces: ['127.0.0.1'] }), 'v=0\r\na=candidate:1 1 udp 1 127.0.0.1 4000 typ host\r\n');
  t.equal(rewriteAnswerCandidates(answer, {}), answer);
});

t.test('announced addresses repeat each host candidate with its port, just below it in priority', async (t) => {
  const answer = 'v=0\r\na=candidate:f1 1 udp 2130706431 10.20.1.2 40001 typ host\r\na=candidate:f2 1 tcp 1518280447 10.20.1.2 40002 typ host tcptype passive\r\n';
  const out = rewriteAnswerCandidates(answer, { interfaces: ['10.20.1.2'], announced: ['198.18.3.100'] }).split('\r\n');
  t.same(out, [
    'v=0',
    'a=candidate:f1 1 udp 2130706431 10.20.1.2 40001 typ host',
    'a=candidate:f1a0 1 udp 2130706430 198.18.3.100 40001 typ host',
    'a=candidate:f2 1 tcp 1518280447 10.20.1.2 40002 typ host tcptype passive',
    'a=candidate:f2a0 1 tcp 1518280446 198.18.3.100 40002 typ host tcptype passive',
    '',
  ]);
});

t.test('remote candidates: malformed ones and addresses a node must never dial are refused', async (t) => {
  const c = (addr: string, extra = '') => `candidate:1 1 udp 2122260223 ${addr} 50000 typ host${extra}`;
  t.equal(refuseRemoteCandidate(c('203.0.113.9'), { allowLoopback: false }), null);
  t.equal(refuseRemoteCandidate(c('2001:db8::1'), { allowLoopback: false }), null);
  t.equal(refuseRemoteCandidate(c('127.0.0.1'), { allowLoopback: false }), 'loopback');
  t.equal(refuseRemoteCandidate(c('127.0.0.1'), { allowLoopback: true }), null, 'a node serving on loopback takes loopback');
  t.equal(refuseRemoteCandidate(c('::1'), { allowLoopback: false }), 'loopback');
  t.equal(refuseRemoteCandidate(c('169.254.169.254'), { allowLoopback: true }), 'linkLocal', 'the cloud metadata address is link-local');
  t.equal(refuseRemoteCandidate(c('fe80::1'), { allowLoopback: true }), 'linkLocal');
  t.equal(refuseRemoteCandidate(c('0.0.0.0'), { allowLoopback: true }), 'unspecified');
  t.equal(refuseRemoteCandidate(c('224.0.0.1'), { allowLoopback: true }), 'multicast');
  t.equal(refuseRemoteCandidate(c('abcd.local'), { allowLoopback: true }), 'mDNS names are not resolved');
  t.equal(refuseRemoteCandidate('candidate:garbage', { allowLoopback: true }), 'malformed');
  t.equal(refuseRemoteCandidate('candidate:1 1 udp 1 1.2.3.4 99999 typ host', { allowLoopback: true }), 'bad port');
  t.equal(refuseRemoteCandidate('candidate:1 1 sctp 1 1.2.3.4 5 typ host', { allowLoopback: true }), 'unknown transport');
});

t.test('offers: refused candidates are dropped, at most MAX_OFFER_CANDIDATES kept; malformed candidates and absurd payload types are 400', async (t) => {
  const cands = ['a=candidate:1 1 udp 1 127.0.0.1 5000 typ host', 'a=candidate:2 1 udp 1 169.254.1.1 5000 typ host', ...Array.from({ length: 40 }, (_, i) => `a=candidate:${i + 10} 1 udp 1 203.0.113.${i + 1} 5000 typ host`)];
  const p = prepareOffer(OBS.replace('a=rtpmap:96 H264/90000', `${cands.join('\r\n')}\r\na=rtpmap:96 H264/90000`), 'whip', limits);
  t.equal(p.candidateCount, MAX_OFFER_CANDIDATES);
  t.notMatch(p.sdp, /candidate:garbage|127\.0\.0\.1 5000|169\.254/);
  const huge = OBS.replace('m=video 9 UDP/TLS/RTP/SAVPF 96', 'm=video 9 UDP/TLS/RTP/SAVPF 99999999999999999999 96').replace('a=rtpmap:96 H264/90000', 'a=rtpmap:99999999999999999999 H264/90000\r\na=rtpmap:96 H264/90000');
  t.throws(() => prepareOffer(huge, 'whip', limits), { httpStatus: 400, message: /payload type "99999999999999999999" is not 0 to 127/ }, 'a 20-digit payload type is named');
  t.throws(() => prepareOffer(OBS.replace('a=rtpmap:96 H264/90000', 'a=candidate:garbage\r\na=rtpmap:96 H264/90000'), 'whip', limits), { httpStatus: 400, message: /malformed candidate/ });
});

t.test('sdpfrag parsing keeps candidates with their mid and the ICE credentials', async (t) => {
  const frag = parseSdpFrag('a=ice-ufrag:uf01\r\na=ice-pwd:0123456789abcdefghijkl\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\na=candidate:1 1 udp 1 1.2.3.4 5 typ host\r\na=end-of-candidates\r\n', 1000);
  t.same(frag, { iceUfrag: 'uf01', icePwd: '0123456789abcdefghijkl', candidates: [{ candidate: 'candidate:1 1 udp 1 1.2.3.4 5 typ host', mid: '0' }] });
  t.throws(() => parseSdpFrag('garbage', 1000), /malformed/);
});
