/**
 * The import graph of our own TypeScript sources, read from their import/export-from statements
 * (type-only imports included: a cycle through types is still two files that each need the other),
 * and its cycles as strongly connected components (Tarjan). Dynamic `import()` is left out: it is
 * how a part loads another lazily on purpose (the media role loads the engine when it needs it).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** Top-level parts whose sources the graph covers (tests, benches and scripts import freely). */
export const PARTS = ['control', 'streams', 'errors', 'images', 'store', 'songs', 'webhooks', 'outbound', 'media', 'native', 'web'] as const;

const SPECIFIER = /^\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\s+from\s+)?['"](\.{1,2}\/[^'"]+)['"]/gm;

function sources(root: string, dir: string, out: string[]): string[] {
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'build' && !entry.name.startsWith('.')) sources(root, path, out);
    } else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** file (relative to root) → the files it imports statically. */
export function importGraph(root: string): Map<string, string[]> {
  const files = PARTS.flatMap((part) => {
    try {
      return sources(root, part, []);
    } catch {
      return [];
    }
  });
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(SPECIFIER)) {
      const target = relative(root, resolve(root, dirname(file), m[1] as string));
      if (known.has(target)) deps.add(target);
    }
    graph.set(file, [...deps]);
  }
  return graph;
}

/** Strongly connected components with more than one file (or a file importing itself). */
export function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, idx.get(w) as number));
    }
    if (low.get(v) === idx.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}
