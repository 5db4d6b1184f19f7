/**
 * The pages people use (web/): static files under /web/, the landing page at /, the plans page
 * at /upgrade (the 402 `upgrade_url`). HTML pages get the music base path injected as a meta tag
 * so they work whatever MUSIC_BASE_PATH is. hls.js is served from node_modules for the players.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { Config } from '../config.ts';

const WEB_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'web');
const require = createRequire(import.meta.url);

export function webRoutes(config: Readonly<Config>): FastifyPluginAsync {
  const html = async (reply: FastifyReply, file: string) => {
    const body = await readFile(join(WEB_DIR, file), 'utf8').catch(() => null);
    if (body === null) return reply.callNotFound();
    const meta = `<meta name="music-base" content="${config.musicBasePath}">`;
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(body.replace('<head>', `<head>\n${meta}`));
  };
  return async (app) => {
    const page = { config: { public: true }, schema: { hide: true } };
    app.get('/', page, (_req, reply) => html(reply, 'index.html'));
    app.get('/upgrade', page, (_req, reply) => html(reply, 'upgrade.html'));
    for (const file of ['songs.html', 'playground.html', 'watch.html']) {
      app.get(`/web/${file}`, page, (_req, reply) => html(reply, file));
    }
    const hlsDir = dirname(require.resolve('hls.js/dist/hls.min.js'));
    app.get('/web/vendor/hls.min.js', page, async (_req, reply) => reply.type('text/javascript').send(await readFile(join(hlsDir, 'hls.min.js'))));
    await app.register(fastifyStatic, { root: WEB_DIR, prefix: '/web/', decorateReply: false, index: false, cacheControl: true, maxAge: 60_000 });
  };
}
