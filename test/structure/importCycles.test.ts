/**
 * No import cycles between our source files (types included): a cycle is two files that each need
 * the other, which usually means a declaration lives in the wrong file. Also checks that the graph
 * is really read (it has the parts' entries and their edges), so an empty graph cannot pass.
 */
import t from 'tap';
import { cycles, importGraph } from './importGraph.ts';

const root = new URL('../../', import.meta.url).pathname;
const graph = importGraph(root);

t.test('the import graph covers every part', async (t) => {
  for (const entry of ['control/main.ts', 'streams/index.ts', 'errors/index.ts', 'store/index.ts', 'songs/index.ts', 'webhooks/index.ts', 'outbound/index.ts', 'media/index.ts', 'native/index.ts']) {
    t.ok(graph.has(entry), `${entry} is in the graph`);
  }
  t.ok((graph.get('streams/index.ts') ?? []).includes('streams/StreamService.ts'), 'edges are read (streams/index.ts → StreamService.ts)');
  t.ok(graph.size > 150, `${graph.size} files`);
});

t.test('a cycle is found when there is one', async (t) => {
  const g = new Map([
    ['a.ts', ['b.ts']],
    ['b.ts', ['c.ts']],
    ['c.ts', ['a.ts']],
    ['d.ts', ['a.ts']],
  ]);
  t.same(cycles(g), [['a.ts', 'b.ts', 'c.ts']]);
});

t.test('no import cycles in the sources', async (t) => {
  const found = cycles(graph);
  t.same(found, [], found.map((c) => c.join(' → ')).join('\n') || 'none');
});
