// docs/configuration.md opens with what a bad value prints: the gateway's own lines, word for word,
// so that the sample shows what an operator will meet (issue 82: the route table's line had lost
// the keys added since, `same_origin_documents`, `cost` and `meters`).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'

const ROOT = join(import.meta.dirname, '..', '..')
const doc = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8')
const sample = (doc.split('\n```\n')[1] ?? '').split('\n')

/** The message `run` throws. */
function thrown(run: () => unknown): string {
  try {
    run()
  } catch (error) {
    return (error as Error).message
  }
  return 'nothing thrown'
}

t.test('the opening sample is what the gateway prints for the values it names', async (t) => {
  t.equal(sample.length, 2, 'two lines, a variable and a route')
  t.equal(
    sample[0],
    thrown(() => loadConfig({ METRICS_PORT: 'x' }, ROOT)),
  )
  const routes = [
    { prefix: '/v1/shipments', upstream: 'http://shipments:8080' },
    { prefix: '/v1/x', upstream: 'http://x:8080', scope: { read: ['x:read'] } },
  ]
  t.equal(
    sample[1],
    thrown(() => loadRouteTable({ routes } as never, undefined)),
  )
})
