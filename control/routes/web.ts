/**
 * The pages people use (web/): static files under /web/, the landing page at /, the plans page
 * at /upgrade (the 402 `upgrade_url`). HTML pages get the music base path injected as a meta tag
 * so they work whatever MUSIC_BASE_PATH is. hls.js is served from node_modules for the players.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { Config } from '../config.ts';

const WEB_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'web');

/**
 * Headers every page is sent with. The CSP's point is scripts: only our own files and the page's
 * own inline scripts (by hash, computed when served) run, so injected markup cannot run code.
 * Connections and media may go to other origins: in scale-out, WHEP sessions and HLS playlists
 * live on media nodes (absolute Location / 307), and song files may come from a blob store.
 * Inline styles stay allowed (the pages use style attributes; styles cannot run code).
 */
export function pageSecurityHeaders(body: string): Record<string, string> {
  const hashes = [...body.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map((m) => `'sha256-${createHash('sha256').update(m[1] ?? '').digest('base64')}'`);
  const csp = [
    "default-src 'self'",
    `script-src 'self' ${hashes.join(' ')}`.trim(),
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    'media-src * blob:',
    'connect-src *',
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { 'content-security-policy': csp, 'x-frame-options': 'DENY', 'x-content-type-options': 'nosniff', 'referrer-policy': 'same-origin' };
}
const require = createRequire(import.meta.url);

export function webRoutes(config: Readonly<Config>): FastifyPluginAsync {
  const html = async (reply: FastifyReply, file: string) => {
    const body = await readFile(join(WEB_DIR, file), 'utf8').catch(() => null);
    if (body === null) return reply.callNotFound();
    const meta = `<meta name="music-base" content="${config.musicBasePath}">`;
    const page = body.replace('<head>', `<head>\n${meta}`);
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').headers(pageSecurityHeaders(page)).send(page);
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
    // HTML only through the routes above (they add the security headers and the meta tag).
    await app.register(fastifyStatic, { root: WEB_DIR, prefix: '/web/', decorateReply: false, index: false, cacheControl: true, maxAge: 60_000, allowedPath: (path) => !path.endsWith('.html') });
  };
}
