/**
 * A real nginx as the TLS proxy our docs recommend, minus the TLS: an HTTP reverse proxy on a free
 * loopback port in front of `upstream`, adding the client's address to X-Forwarded-For
 * (`$proxy_add_x_forwarded_for`), started with a temp config and killed on `t`'s teardown.
 * Clients with different addresses bind their socket to different loopback sources (127.0.0.2,
 * 127.0.0.3…: all of 127/8 is local on Linux), so nginx sees, and forwards, different peers.
 */
import { startNginx } from './nginxProcess.ts';

export { haveNginx } from './nginxProcess.ts';

export interface NginxProxy {
  /** http://127.0.0.1:<port> of the proxy. */
  url: string;
}

/** Starts nginx proxying every path to `upstream` (http://host:port) the way docs/operations.md shows. */
export async function startNginxProxy(t: { teardown(fn: () => unknown): void }, upstream: string): Promise<NginxProxy> {
  const { url } = await startNginx(t, {
    name: 'rv-proxy',
    http: (port) => `  access_log off;
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass ${upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }
  }`,
    // Ready when it proxies: any HTTP answer from the upstream through it.
    readyPath: '/livez',
    readyStatus: 200,
  });
  return { url };
}
