/**
 * Every SDP a client sends is checked against its grammar before anything exists for it: a
 * keyless WHEP offer and a keyed WHIP offer, cut from real Chromium offers, each broken in one
 * place, through the real HTTP routes of a real node. Each answers 400 naming what is wrong, no
 * stream or session is made (the node's stream count, what `reverie_media_streams` reports, stays
 * 0), and a real OBS-like publisher and a Chromium viewer still work afterwards.
 */
import t from 'tap';
import { launchChromium } from '../../helpers/chromium.ts';
import { stampedH264 } from '../../helpers/h264Source.ts';
import { startObsPublishers } from '../../helpers/obsPublisher.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from '../harness.ts';

type W = Window & PeerPage;

const hex = (n: number) => Array.from({ length: n }, () => 'AB').join(':');

/** Applies `fn` to the video m-section of `sdp` only. */
function inVideo(sdp: string, fn: (section: string) => string): string {
  const at = sdp.indexOf('m=video');
  const end = sdp.indexOf('m=', at + 2);
  const stop = end === -1 ? sdp.length : end;
  return sdp.slice(0, at) + fn(sdp.slice(at, stop)) + sdp.slice(stop);
}

/** Adds `line` to the video m-section, after its a=mid. */
const addToVideo = (line: string) => (sdp: string) => inVideo(sdp, (v) => v.replace(/(a=mid:\S+\r\n)/, `$1${line}\r\n`));

/** One broken offer: what to do to a real offer, and what the 400 must say. */
const MUTATIONS: [name: string, mutate: (sdp: string) => string, says: RegExp][] = [
  // The attacker's two offers.
  ['a fingerprint that is not hex', (s) => s.replace(/a=fingerprint:\S+ \S+/g, 'a=fingerprint:sha-256 ZZ:ZZ'), /sha-256 fingerprint "ZZ:ZZ" is not colon-separated hex pairs/],
  ['an m-line with a port and payload type out of range', (s) => s.replace(/m=video .*\r\n/, 'm=video 99999999 RTP/AVP 9999999999\r\n'), /port "99999999" is not 0 to 65535/],
  // Fingerprints.
  ['a fingerprint of the wrong length', (s) => s.replace(/a=fingerprint:\S+ \S+/g, 'a=fingerprint:sha-256 AB:CD'), /sha-256 fingerprint has 2 bytes, needs 32/],
  ['an md5 fingerprint', (s) => s.replace(/a=fingerprint:\S+ \S+/g, `a=fingerprint:md5 ${hex(16)}`), /unsupported fingerprint hash function "md5"/],
  ['a fingerprint without a value', (s) => s.replace(/a=fingerprint:\S+ \S+/g, 'a=fingerprint:sha-256'), /is not "<hash-function> <hex pairs>"/],
  ['no fingerprint', (s) => s.replace(/a=fingerprint:.*\r\n/g, ''), /no DTLS fingerprint/],
  // m-lines.
  ['a negative port', (s) => s.replace(/m=video \d+/, 'm=video -1'), /port "-1" is not 0 to 65535/],
  ['an unknown transport protocol', (s) => s.replace(/m=video (\d+) \S+/, 'm=video $1 FOO/BAR'), /unknown transport protocol "FOO\/BAR"/],
  ['payload type 128', (s) => s.replace(/(m=video .*)\r\n/, '$1 128\r\n'), /payload type "128" is not 0 to 127/],
  ['a payload type listed twice', (s) => s.replace(/(m=video \d+ \S+ (\d+))(.*)\r\n/, '$1$3 $2\r\n'), /payload type \d+ is listed twice/],
  ['an m-line with no formats', (s) => s.replace(/(m=video \d+ \S+) .*\r\n/, '$1\r\n'), /lists no payload types/],
  // rtpmap, fmtp, rtcp-fb.
  ['an rtpmap payload type of 300', addToVideo('a=rtpmap:300 VP8/90000'), /payload type "300" is not 0 to 127/],
  ['an rtpmap clock rate of 0', addToVideo('a=rtpmap:127 VP8/0'), /clock rate "0" is not 1 to 4294967295 Hz/],
  ['an rtpmap without encoding', addToVideo('a=rtpmap:127'), /rtpmap must be "<payload type> <encoding>\/<clock rate>/],
  ['a profile-level-id that is not hex', (s) => s.replace(/profile-level-id=42e01f/g, 'profile-level-id=zzzzzz'), /profile-level-id must be 6 hex digits/],
  ['packetization-mode 7', (s) => s.replace(/packetization-mode=1/g, 'packetization-mode=7'), /packetization-mode must be 0, 1 or 2/],
  ['an rtcp-fb payload type of 999', addToVideo('a=rtcp-fb:999 nack'), /payload type "999" is not 0 to 127/],
  // extmap, ssrc.
  ['extension id 0', addToVideo('a=extmap:0 urn:ietf:params:rtp-hdrext:toffset'), /extension id 0 is not 1 to 14 or 16 to 255/],
  ['extension id 300', addToVideo('a=extmap:300 urn:ietf:params:rtp-hdrext:toffset'), /extension id 300 is not/],
  ['an extension direction that does not exist', addToVideo('a=extmap:20/sideways urn:x'), /extension direction "sideways"/],
  ['two extensions with one id', (s) => inVideo(s, (v) => v.replace(/(a=extmap:(\d+) .*\r\n)/, '$1a=extmap:$2 urn:x:other\r\n')), /two a=extmap lines with id \d+/],
  ['an ssrc beyond 32 bits', addToVideo('a=ssrc:99999999999 cname:x'), /ssrc must be "<0 to 4294967295>/],
  ['an ssrc-group of words', addToVideo('a=ssrc-group:FID x y'), /ssrc-group must be/],
  // Candidates.
  ['a garbage candidate', addToVideo('a=candidate:garbage'), /malformed candidate: needs/],
  ['a candidate on port 70000', addToVideo('a=candidate:1 1 udp 2122260223 203.0.113.9 70000 typ host'), /malformed candidate: port "70000" is not 0 to 65535/],
  ['a candidate with priority 0', addToVideo('a=candidate:1 1 udp 0 203.0.113.9 5000 typ host'), /malformed candidate: priority "0"/],
  // ICE credentials (RFC 8839).
  ['a two-character ice-ufrag', (s) => s.replace(/a=ice-ufrag:\S+/g, 'a=ice-ufrag:ab'), /a=ice-ufrag must be 4 to 256 characters/],
  ['an ice-ufrag with symbols', (s) => s.replace(/a=ice-ufrag:\S+/g, 'a=ice-ufrag:ab$%cd'), /a=ice-ufrag may hold only letters, digits/],
  ['a short ice-pwd', (s) => s.replace(/a=ice-pwd:\S+/g, 'a=ice-pwd:short'), /a=ice-pwd must be 22 to 256 characters/],
  ['no ice-pwd', (s) => s.replace(/a=ice-pwd:.*\r\n/g, ''), /no ice-ufrag\/ice-pwd/],
  ['two different ice-ufrags in one m-section', addToVideo('a=ice-ufrag:zzzzzzzz'), /two different a=ice-ufrag lines/],
  // Setup, mid, bundle, directions.
  ['setup holdconn', (s) => s.replace(/a=setup:actpass/g, 'a=setup:holdconn'), /setup role must be actpass, active, passive/],
  ['a 17-character mid', (s) => s.replace(/a=mid:1\r\n/, `a=mid:${'m'.repeat(17)}\r\n`), /mid must be a token of 1 to 16 characters/],
  ['one mid on both m-lines', (s) => s.replace(/a=mid:1\r\n/, 'a=mid:0\r\n'), /mid "0" is used by another m-line/],
  ['a BUNDLE group naming an unknown mid', (s) => s.replace(/a=group:BUNDLE (.*)\r\n/, 'a=group:BUNDLE $1 7\r\n'), /a=group:BUNDLE names mid "7", which no m-line has/],
  ['two directions in one m-section', addToVideo('a=inactive'), /both a=(inactive and a=\w+|\w+ and a=inactive)/],
  ['rtcp-mux with a value', addToVideo('a=rtcp-mux:yes'), /a=rtcp-mux takes no value/],
  ['an rtcp port of 99999', addToVideo('a=rtcp:99999 IN IP4 0.0.0.0'), /rtcp must be "<port 0 to 65535>/],
  ['an msid of 65 characters', addToVideo(`a=msid:${'x'.repeat(65)}`), /msid must be "<id> \[<appdata>\]"/],
  // Session lines.
  ['no o= line', (s) => s.replace(/o=.*\r\n/, ''), /missing the required o= line/],
  ['two s= lines', (s) => s.replace(/(s=.*\r\n)/, '$1s=again\r\n'), /2 s= lines/],
  ['t= of words', (s) => s.replace(/t=.*\r\n/, 't=now later\r\n'), /is not "t=<start> <stop>"/],
  ['c= without an address', (s) => s.replace(/c=IN IP4 \S+/, 'c=IN IP4'), /is not "c=IN IP4\|IP6 <address>"/],
  ['a negative bandwidth', addToVideo('b=AS:-5'), /is not "b=<type>:<0 to 4294967295>"/],
  ['a NUL byte in an attribute', addToVideo('a=x-note:a\u0000b'), /holds a control character/],
];

t.test('the issue\'s two offers and 45 mutations of a real Chromium offer: 400 naming the problem on keyless WHEP and keyed WHIP, nothing made; a real publisher and viewer work afterwards', { timeout: 180_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { whipPerAddressPerMinute: 10_000, whepPerAddressPerMinute: 10_000, whepPerPlaybackPerMinute: 10_000 } });
  const ctx = await launchChromium(t, { fakeMedia: true });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  const offer = (direction: 'sendonly' | 'recvonly') =>
    page.evaluate(async (direction) => {
      const pc = new RTCPeerConnection();
      pc.addTransceiver('audio', { direction });
      pc.addTransceiver('video', { direction });
      await pc.setLocalDescription(await pc.createOffer());
      const sdp = pc.localDescription?.sdp ?? '';
      pc.close();
      return sdp;
    }, direction);
  const offers = { whep: await offer('recvonly'), whip: await offer('sendonly') };
  t.match(offers.whep, /a=mid:1\r\n/, 'a Chromium offer with audio (mid 0) and video (mid 1)');
  const post = (role: 'whip' | 'whep', sdp: string) =>
    fetch(role === 'whip' ? srv.whipUrl : srv.whepUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/sdp', ...(role === 'whip' ? { authorization: `Bearer ${STREAM_KEY}` } : {}) },
      body: sdp,
      signal: AbortSignal.timeout(20_000),
    });

  t.ok(MUTATIONS.length >= 45, `${MUTATIONS.length} mutations`);
  const wrong: string[] = [];
  for (const [name, mutate, says] of MUTATIONS) {
    for (const role of ['whep', 'whip'] as const) {
      const sdp = mutate(offers[role]);
      if (sdp === offers[role]) {
        wrong.push(`${role} ${name}: the mutation changed nothing`);
        continue;
      }
      const res = await post(role, sdp);
      const body = await res.text();
      if (res.status !== 400 || !says.test(body)) wrong.push(`${role} ${name}: ${res.status} ${body.trim().slice(0, 200)}`);
      if (srv.node.streamCount !== 0) wrong.push(`${role} ${name}: the node holds ${srv.node.streamCount} streams`);
    }
  }
  t.same(wrong, [], 'every broken offer: 400 naming the problem, no stream');
  t.equal(srv.node.streamCount, 0, 'reverie_media_streams did not move');

  // The unbroken offers pass the same checks.
  const view = await post('whep', offers.whep);
  t.equal(view.status, 201, "Chromium's own viewer offer is accepted");
  const pub = await post('whip', offers.whip);
  t.equal(pub.status, 201, "Chromium's own publisher offer is accepted");
  // A viewer's session URL is its credential; a publisher's session needs its stream key.
  t.equal((await fetch(String(view.headers.get('location')), { method: 'DELETE' })).status, 200, "the viewer's session ends on DELETE");
  t.equal((await fetch(String(pub.headers.get('location')), { method: 'DELETE', headers: { authorization: `Bearer ${STREAM_KEY}` } })).status, 200, "the publisher's session ends on DELETE with its key");

  // A real OBS-like publisher (libdatachannel) and a Chromium viewer still work.
  const pubs = startObsPublishers(t);
  const obs = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 120 }) });
  t.equal(obs.status, 201, 'the OBS-like publisher is answered');
  const played = await page.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  t.equal(played.status, 201, 'a Chromium viewer is answered');
  t.ok((await page.evaluate(() => (window as unknown as W).waitFrames(10, 20_000))) >= 10, 'and it receives frames');
  t.equal(srv.node.getStream(STREAM_ID)?.publisher?.connected, true, 'the publisher is connected');
  t.notOk(PLAYBACK_ID.includes(STREAM_ID), 'playback ids are not stream ids');
});

t.test('trickle sdpfrags are checked the same way: 400 naming the line, the session unharmed', { timeout: 60_000 }, async (t) => {
  const srv = await startMediaServer(t);
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  const offer = await page.evaluate(async () => {
    const pc = new RTCPeerConnection();
    pc.addTransceiver('video', { direction: 'recvonly' });
    await pc.setLocalDescription(await pc.createOffer());
    return pc.localDescription?.sdp ?? '';
  });
  const res = await fetch(srv.whepUrl, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: offer });
  t.equal(res.status, 201);
  const location = String(res.headers.get('location'));
  const ufrag = /a=ice-ufrag:(\S+)/.exec(offer)?.[1] ?? '';
  const patch = (lines: string[]) =>
    fetch(location, { method: 'PATCH', headers: { 'content-type': 'application/trickle-ice-sdpfrag' }, body: `${lines.join('\r\n')}\r\n` });
  const cases: [string[], RegExp][] = [
    [[`a=ice-ufrag:${ufrag}`, 'a=ice-pwd:short', 'a=mid:0', 'a=candidate:1 1 udp 2122260223 203.0.113.9 5000 typ host'], /a=ice-pwd must be 22 to 256/],
    [['a=mid:0', 'a=candidate:1 1 udp 2122260223 203.0.113.9 99999 typ host'], /port "99999" is not 0 to 65535/],
    [['a=mid:0', 'a=candidate:1 0 udp 2122260223 203.0.113.9 5000 typ host'], /component "0" is not 1 to 256/],
    [['a=mid:', 'a=candidate:1 1 udp 2122260223 203.0.113.9 5000 typ host'], /mid must be a token/],
    [['m=audio 99999999 UDP/TLS/RTP/SAVPF 0'], /port is not 0 to 65535/],
    [['a=mid:0', 'a=candidate:1 1 udp 2122260223 203.0.113.9 5000 typ host generation'], /malformed candidate/],
  ];
  for (const [lines, says] of cases) {
    const r = await patch(lines);
    const body = await r.text();
    t.equal(r.status, 400, `${lines.at(-1)} → 400`);
    t.match(body, says, body.trim());
  }
  const ok = await patch([`a=ice-ufrag:${ufrag}`, 'a=mid:0', 'a=candidate:1 1 udp 2122260223 203.0.113.9 5000 typ host']);
  t.equal(ok.status, 204, 'a well-formed candidate is still taken');
  t.equal(srv.node.getSession(location.split('/').pop() ?? '')?.trickled, 1);
});
