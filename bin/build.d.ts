// Types of bin/build.js (plain JavaScript: bin/reverie.js runs it before anything could load tsx).

/** The checkout (or the image's /app). */
export declare const ROOT: string;
/** dist/ under ROOT: where the build goes. */
export declare const DEFAULT_OUT: string;
/** The server's source folders. */
export declare const SOURCE_DIRS: readonly string[];
/** Files the modules read next to themselves, copied to the same place in the build. */
export declare const ASSETS: readonly string[];
/** The newest modification time (ms) among the build's inputs under `root`; 0 without sources. */
export declare function newestInput(root?: string): number;
/** Whether `out` holds a finished build at least as new as every input under `root`. */
export declare function buildState(root?: string, out?: string): { current: boolean; reason: 'missing' | 'older than the sources' | 'current' };
/** Builds `root`'s sources into `out` (swapped in when complete). */
export declare function build(opts?: { root?: string; out?: string; log?: (line: string) => void }): Promise<{ files: number; out: string }>;
