/**
 * Headless Debian Chromium for end-to-end tests (playwright-core, no browser download).
 * `launchChromium(t)` returns a persistent context that is closed, and its profile directory
 * removed, on the test's teardown. Fake camera and microphone are on by default (WebRTC tests);
 * pass `{ fakeMedia: false }` for playback-only tests (hls.js).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM_PATH = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface LaunchOptions {
  /** Fake camera + microphone with auto-granted permission. Default true. */
  fakeMedia?: boolean;
  /** A Y4M/MJPEG file Chromium plays as the fake camera (`--use-file-for-fake-video-capture`). */
  fakeVideoFile?: string;
  extraArgs?: string[];
  /** Runs Chromium inside this network namespace (its kernel name: `lab.ns(name)` of netns.ts). */
  netns?: string;
}

export async function launchChromium(t: Teardown, opts: LaunchOptions = {}): Promise<BrowserContext> {
  const userDataDir = mkdtempSync(join(tmpdir(), 'reverie-chromium-'));
  const args = [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--disable-quic',
    '--autoplay-policy=no-user-gesture-required',
    // Headless tabs must not be throttled: background timers would stall WebRTC.
    '--disable-background-timer-throttling',
    '--disable-renderer-backgrounding',
    '--disable-backgrounding-occluded-windows',
  ];
  if (opts.fakeMedia !== false) args.push('--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream');
  if (opts.fakeVideoFile) args.push(`--use-file-for-fake-video-capture=${opts.fakeVideoFile}`);
  let executablePath = CHROMIUM_PATH;
  if (opts.netns) {
    // Playwright starts the executable it is given; `ip netns exec` keeps its pipes (fds 3, 4).
    executablePath = join(userDataDir, 'chromium-in-netns');
    writeFileSync(executablePath, `#!/bin/sh\nexec ip netns exec '${opts.netns}' '${CHROMIUM_PATH}' "$@"\n`, { mode: 0o755 });
    // Offer the namespace's real addresses: a lab has no mDNS to resolve the hidden ones.
    args.push('--disable-features=WebRtcHideLocalIpsWithMdns');
  }
  args.push(...(opts.extraArgs ?? []));
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath, headless: true, args });
  t.teardown(async () => {
    await context.close().catch(() => undefined);
    rmSync(userDataDir, { recursive: true, force: true });
  });
  return context;
}
