/**
 * `npm run bench -- serialisers [--rounds 9] [--ms 100]`: the cost per response of checking a
 * response against its zod schema and writing it as JSON, three ways side by side on the API's
 * own schemas: fastify-type-provider-zod's compiler (zod `encode`, then JSON.stringify), ours
 * (control/ResponseSerializer.ts: zod `parse` where the schema acts the same both ways, then
 * JSON.stringify), and fast-json-stringify compiled from the schema's JSON Schema (no check at
 * all: a wrong shape goes out as it is). Each round runs every serialiser for `ms` in turn, so a
 * load swing on a shared machine hits them alike; ratios are to the library's, per round.
 */
import fastJsonStringify from 'fast-json-stringify';
import { serializerCompiler as libraryCompiler } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { responseSerializerCompiler } from '../control/ResponseSerializer.ts';
import { SongSchema, UsageSchema } from '../control/routes/music.ts';
import { printTable, progress, summarize, writeResult } from './lib.ts';

type Serialise = (data: unknown) => string;

export default async function bench(args: Map<string, string>): Promise<void> {
  const rounds = Number(args.get('rounds') ?? 9);
  const ms = Number(args.get('ms') ?? 100);
  const base = 'https://api.example.com/music/v1/songs/sng_0123456789';
  const take = (n: number) => ({
    n,
    seed: 1234 + n,
    duration: 93.5,
    waveform: Array.from({ length: 200 }, (_, i) => Math.round(Math.abs(Math.sin(i / 7)) * 1000) / 1000),
    mp3_url: `${base}/${n}.mp3?sig=abc`,
    wav_url: `${base}/${n}.wav?sig=abc`,
    midi_url: `${base}/${n}.mid?sig=abc`,
    stems: { drums: `${base}/${n}.drums.wav`, bass: `${base}/${n}.bass.wav`, chords: `${base}/${n}.chords.wav`, lead: `${base}/${n}.lead.wav`, effects: `${base}/${n}.effects.wav` },
    stems_zip_url: `${base}/${n}.stems.zip`,
  });
  const cases: { name: string; schema: z.ZodType; data: unknown }[] = [
    { name: 'usage (GET /music/v1/usage)', schema: UsageSchema, data: { plan: 'free', limit: 10, used: 3, resets_at: '2026-12-01T00:00:00.000Z' } },
    {
      name: 'song, done, 2 takes with stems',
      schema: SongSchema,
      data: {
        id: 'sng_0123456789', status: 'done', position: null, progress: 1, prompt: 'lo-fi piano, rain, 80 bpm', duration: 93.5, bpm: 80, key: 'C minor', loop: false, seed: 1234,
        variations: 2, created_at: '2026-11-28T09:00:00.000Z', finished_at: '2026-11-28T09:01:00.000Z', error: null, takes: [take(1), take(2)], stems: true,
        sections: [{ name: 'intro', start_bar: 0, bars: 4, energy: 0.3, style: '' }, { name: 'verse', start_bar: 4, bars: 16, energy: 0.6, style: 'soft' }], streaming_mp3_urls: [],
      },
    },
  ];

  const results = [];
  const bar = progress('serialisers bench', cases.length * rounds);
  for (const c of cases) {
    const route = { schema: c.schema, method: 'GET', url: '/bench', httpStatus: '200' };
    const { $schema: _, ...jsonSchema } = z.toJSONSchema(c.schema, { target: 'draft-07', io: 'output' });
    const serialisers: [string, Serialise][] = [
      ['library: zod encode + JSON.stringify', libraryCompiler(route) as Serialise],
      ['ours: zod parse + JSON.stringify', responseSerializerCompiler(route) as Serialise],
      ['fast-json-stringify (no check)', fastJsonStringify(jsonSchema as Parameters<typeof fastJsonStringify>[0]) as Serialise],
    ];
    const expected = serialisers[0]![1](c.data);
    for (const [name, f] of serialisers) {
      if (JSON.stringify(JSON.parse(f(c.data))) !== JSON.stringify(JSON.parse(expected))) throw new Error(`${name} writes a different body for ${c.name}`);
    }
    // Warm-up (JIT), then alternating timed windows.
    for (const [, f] of serialisers) for (let i = 0; i < 20_000; i++) f(c.data);
    const perCall = serialisers.map(() => [] as number[]);
    for (let r = 0; r < rounds; r++) {
      for (const [i, [, f]] of serialisers.entries()) {
        let calls = 0;
        const t0 = performance.now();
        const end = t0 + ms;
        while (performance.now() < end) {
          for (let k = 0; k < 100; k++) f(c.data);
          calls += 100;
        }
        perCall[i]!.push(((performance.now() - t0) * 1000) / calls);
      }
      bar.tick();
    }
    for (const [i, [name]] of serialisers.entries()) {
      const us = summarize(perCall[i]!);
      const ratio = summarize(perCall[i]!.map((x, r) => x / perCall[0]![r]!));
      results.push({ case: c.name, serialiser: name, usP50: us.p50, usP95: us.p95, ratioP50: ratio.p50, ratioP95: ratio.p95 });
    }
  }
  bar.done();
  printTable(
    `serialisers: µs per response, ${rounds} rounds × ${ms} ms each, ratio to the library's compiler (median and p95 of rounds)`,
    results.map((x) => ({ case: x.case, serialiser: x.serialiser, 'µs p50': x.usP50, 'µs p95': x.usP95, 'ratio p50': x.ratioP50, 'ratio p95': x.ratioP95 })),
  );
  const path = writeResult('serialisers', { rounds, ms, results });
  console.log(`\nwrote ${path}`);
}
