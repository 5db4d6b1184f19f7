/**
 * How an RTMP URL is split for ffmpeg (application, stream name, server) and what of it logs and
 * status may show: one row per shape a user or a streaming service writes. The redacted form must
 * never hold the key, in any of its spellings.
 */
import t from 'tap';
import { parseRtmpTarget, redactRtmpText, redactRtmpUrl } from '../../../media/rtmp/RtmpRelay.ts';

interface Row {
  url: string;
  /** What must never show: the key and other secrets of the URL. */
  secret: string[];
  /** Also never shown, but not secret to ffmpeg's own output (the instance is in tcUrl). */
  alsoHidden?: string[];
  app: string;
  playpath: string;
  redacted: string;
  host?: string;
  port?: number;
  tls?: boolean;
  tcUrl?: string;
}

const rows: Row[] = [
  // The common form (YouTube `live2`, Twitch `app`, Restream `live`).
  { url: 'rtmp://a.rtmp.youtube.com/live2/sekretkeyA1', secret: ['sekretkeyA1'], app: 'live2', playpath: 'sekretkeyA1', redacted: 'rtmp://a.rtmp.youtube.com/live2/…', host: 'a.rtmp.youtube.com', port: 1935, tls: false, tcUrl: 'rtmp://a.rtmp.youtube.com/live2' },
  // A trailing slash: ffmpeg alone would read `app/KEY` as the application.
  { url: 'rtmp://8.8.8.8/app/sekretkeyA1/', secret: ['sekretkeyA1'], app: 'app', playpath: 'sekretkeyA1', redacted: 'rtmp://8.8.8.8/app/…', tcUrl: 'rtmp://8.8.8.8/app' },
  { url: 'rtmp://8.8.8.8/app/sekretkeyA1///', secret: ['sekretkeyA1'], app: 'app', playpath: 'sekretkeyA1', redacted: 'rtmp://8.8.8.8/app/…' },
  // Empty segments anywhere.
  { url: 'rtmp://h.example.com//app//sekretkeyB2', secret: ['sekretkeyB2'], app: 'app', playpath: 'sekretkeyB2', redacted: 'rtmp://h.example.com/app/…' },
  // An application instance (Wowza): the instance is shown to nobody either.
  { url: 'rtmp://h.example.com/app/inst/sekretkeyC3', secret: ['sekretkeyC3'], alsoHidden: ['inst'], app: 'app/inst', playpath: 'sekretkeyC3', redacted: 'rtmp://h.example.com/app/…', tcUrl: 'rtmp://h.example.com/app/inst' },
  { url: 'rtmp://h.example.com/app/inst/sekretkeyC3/', secret: ['sekretkeyC3'], app: 'app/inst', playpath: 'sekretkeyC3', redacted: 'rtmp://h.example.com/app/…' },
  // ffmpeg's rule: a `:` in the second segment makes it part of the stream name (`mp4:dir/file`).
  { url: 'rtmp://h.example.com/vod/mp4:sekret/dir', secret: ['mp4:sekret/dir'], app: 'vod', playpath: 'mp4:sekret/dir', redacted: 'rtmp://h.example.com/vod/…' },
  // Facebook: the service's key is `KEY?s_bl=…` and the query carries a token of its own.
  {
    url: 'rtmps://live-api-s.facebook.com:443/rtmp/FB-1234-0-AbSekret?s_bl=1&s_psm=1&s_sc=5678&s_sw=0&s_vt=api-s&a=AbTokenZ9',
    secret: ['FB-1234-0-AbSekret', 'AbTokenZ9', 's_sc=5678'],
    app: 'rtmp',
    playpath: 'FB-1234-0-AbSekret?s_bl=1&s_psm=1&s_sc=5678&s_sw=0&s_vt=api-s&a=AbTokenZ9',
    redacted: 'rtmps://live-api-s.facebook.com:443/rtmp/…',
    host: 'live-api-s.facebook.com',
    port: 443,
    tls: true,
    tcUrl: 'rtmps://live-api-s.facebook.com:443/rtmp',
  },
  // The key in the query only.
  { url: 'rtmp://h.example.com/live/stream?key=sekretkeyD4', secret: ['sekretkeyD4'], app: 'live', playpath: 'stream?key=sekretkeyD4', redacted: 'rtmp://h.example.com/live/…' },
  { url: 'rtmp://h.example.com/live?streamkey=sekretkeyE5', secret: ['sekretkeyE5'], app: 'live?streamkey=sekretkeyE5', playpath: '', redacted: 'rtmp://h.example.com/live/…' },
  { url: 'rtmp://h.example.com/?streamkey=sekretkeyE5', secret: ['sekretkeyE5'], app: '?streamkey=sekretkeyE5', playpath: '', redacted: 'rtmp://h.example.com/…' },
  // Userinfo: never shown, never sent.
  { url: 'rtmp://pubuser:sekretpass@h.example.com/app/sekretkeyF6', secret: ['sekretpass', 'pubuser', 'sekretkeyF6'], app: 'app', playpath: 'sekretkeyF6', redacted: 'rtmp://…@h.example.com/app/…', host: 'h.example.com' },
  // A fragment means nothing to RTMP: dropped, and hidden.
  { url: 'rtmp://h.example.com/app/sekretkeyG7#sekretfrag', secret: ['sekretkeyG7', 'sekretfrag'], app: 'app', playpath: 'sekretkeyG7', redacted: 'rtmp://h.example.com/app/…' },
  // Upper-case scheme, odd port.
  { url: 'RTMPS://Live.Example.com:4443/App/sekretkeyH8', secret: ['sekretkeyH8'], app: 'App', playpath: 'sekretkeyH8', redacted: 'rtmps://Live.Example.com:4443/App/…', tls: true, port: 4443 },
  { url: 'rtmps://x.example.com/app/sekretkeyI9', secret: ['sekretkeyI9'], app: 'app', playpath: 'sekretkeyI9', redacted: 'rtmps://x.example.com/app/…', port: 443, tls: true },
  // IPv6 literals.
  { url: 'rtmp://[2001:db8::1]/app/sekretkeyJ0/', secret: ['sekretkeyJ0'], app: 'app', playpath: 'sekretkeyJ0', redacted: 'rtmp://[2001:db8::1]/app/…', host: '2001:db8::1', tcUrl: 'rtmp://[2001:db8::1]/app' },
  { url: 'rtmp://[2001:db8::1]:19350/app/sekretkeyJ0', secret: ['sekretkeyJ0'], app: 'app', playpath: 'sekretkeyJ0', redacted: 'rtmp://[2001:db8::1]:19350/app/…', port: 19350 },
  // Percent-encoding: sent as written (ffmpeg does not decode), hidden in both spellings.
  { url: 'rtmp://h.example.com/app/sekret%2Fkey%41', secret: ['sekret%2Fkey%41', 'sekret/keyA'], app: 'app', playpath: 'sekret%2Fkey%41', redacted: 'rtmp://h.example.com/app/…' },
  // A lone segment may be a key without its application: hidden.
  { url: 'rtmp://h.example.com/sekretkeyK1', secret: ['sekretkeyK1'], app: 'sekretkeyK1', playpath: '', redacted: 'rtmp://h.example.com/…' },
  { url: 'rtmp://h.example.com/sekretkeyK1/', secret: ['sekretkeyK1'], app: 'sekretkeyK1', playpath: '', redacted: 'rtmp://h.example.com/…' },
  { url: 'rtmp://h.example.com', secret: [], app: '', playpath: '', redacted: 'rtmp://h.example.com' },
];

t.test('each URL shape is split as ffmpeg should read it, empty segments dropped', async (t) => {
  for (const r of rows) {
    const got = parseRtmpTarget(r.url);
    t.equal(got.app, r.app, `${r.url}: app`);
    t.equal(got.playpath, r.playpath, `${r.url}: stream name`);
    for (const k of ['host', 'port', 'tls', 'tcUrl'] as const) if (r[k] !== undefined) t.equal(got[k], r[k], `${r.url}: ${k}`);
    t.notOk(got.tcUrl.includes('@'), `${r.url}: no userinfo in tcUrl`);
  }
});

t.test('the redacted form shows server and application only, never any secret of the URL', async (t) => {
  for (const r of rows) {
    const shown = redactRtmpUrl(r.url);
    t.equal(shown, r.redacted, r.url);
    for (const s of [...r.secret, ...(r.alsoHidden ?? [])]) t.notOk(shown.includes(s), `${r.url}: hides ${s}`);
  }
  t.equal(redactRtmpUrl('not a url sekretkeyL2'), 'rtmp://…', 'unparseable input shows nothing of itself');
});

t.test('every secret spelling is listed for scrubbing ffmpeg output', async (t) => {
  for (const r of rows) {
    const { secrets } = parseRtmpTarget(r.url);
    for (const s of r.secret.filter((x) => !r.url.includes(`#${x}`))) t.ok(secrets.some((x) => x.includes(s) || s.includes(x)), `${r.url}: ${s} is scrubbed`);
  }
});

t.test("ffmpeg's error lines lose every spelling of the key and show the real server, not the relay", async (t) => {
  const cases: [url: string, line: string, hidden: string[]][] = [
    ['rtmp://8.8.8.8/app/sekretkeyA1/', 'rtmp://127.0.0.1:41235/: Server error: No such stream sekretkeyA1', ['sekretkeyA1', '127.0.0.1']],
    ['rtmp://h.example.com/app/sekret%2Fkey', "Cannot publish 'sekret/key' to rtmp://h.example.com/app/sekret%2Fkey, refused", ['sekret/key', 'sekret%2Fkey']],
    ['rtmps://live-api-s.facebook.com:443/rtmp/FB-1-AbSekret?s_bl=1&a=AbTokenZ9', 'publish FB-1-AbSekret?s_bl=1&a=AbTokenZ9 failed; a=AbTokenZ9', ['AbSekret', 'AbTokenZ9']],
    ['rtmp://pubuser:sekretpass@h.example.com/app/sekretkeyF6', 'auth failed for pubuser (sekretpass)', ['sekretpass', 'pubuser']],
  ];
  for (const [url, line, hidden] of cases) {
    const out = redactRtmpText(line, parseRtmpTarget(url));
    for (const h of hidden) t.notOk(out.includes(h), `${line} → ${out}: no ${h}`);
  }
  t.match(redactRtmpText('rtmp://127.0.0.1:41235/: Input/output error', parseRtmpTarget('rtmp://8.8.8.8/app/k3y/')), /^rtmp:\/\/8\.8\.8\.8\b.*Input\/output error$/, 'the relay shows as the real server');
});

t.test('a URL that is not rtmp(s) is refused by the parser', async (t) => {
  t.throws(() => parseRtmpTarget('http://h.example.com/app/key'), /not an rtmp/);
});
