/**
 * Reading the fragmented MP4 our LL-HLS packager writes, enough for tests to check its timeline:
 * each fragment's media span per track.
 */

/** Each fragment's (moof) media span on one track, in its timescale, in file order. */
export function trackSpans(bytes: Buffer, trackId: number): { start: number; end: number }[] {
  const spans: { start: number; end: number }[] = [];
  const children = (buf: Buffer, from: number, to: number, visit: (type: string, body: number, end: number) => void) => {
    for (let o = from; o + 8 <= to; ) {
      const size = buf.readUInt32BE(o);
      visit(buf.toString('latin1', o + 4, o + 8), o + 8, o + size);
      o += size;
    }
  };
  children(bytes, 0, bytes.length, (type, body, end) => {
    if (type !== 'moof') return;
    children(bytes, body, end, (type, body, end) => {
      if (type !== 'traf') return;
      let id = -1;
      let start = 0;
      let dur = 0;
      children(bytes, body, end, (type, b) => {
        if (type === 'tfhd') id = bytes.readUInt32BE(b + 4);
        if (type === 'tfdt') start = Number(bytes.readBigUInt64BE(b + 4)); // version 1
        if (type === 'trun') {
          // flags 0x701: data offset, then duration, size and flags per sample.
          const count = bytes.readUInt32BE(b + 4);
          for (let i = 0; i < count; i++) dur += bytes.readUInt32BE(b + 12 + i * 12);
        }
      });
      if (id === trackId) spans.push({ start, end: start + dur });
    });
  });
  return spans;
}
