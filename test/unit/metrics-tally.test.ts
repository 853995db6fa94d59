// The request path's metrics (src/ops/metrics.ts, src/proxy/metrics.ts) count into plain numbers and a histogram of our
// own; a scrape must read exactly what prom-client's own Counter and Histogram would have shown.
import { Counter, Histogram, Registry } from 'prom-client'
import t from 'tap'
import type { ROUTE_KINDS } from '../../src/http/route-kind.js'
import { createMetrics, LatencyHistogram } from '../../src/ops/metrics.js'

const BUCKETS = [0.001, 0.01, 0.1, 1]
// On a bound, between bounds, past the last one, zero.
const OBSERVED = [0.001, 0.0005, 0.05, 0.1, 3, 0, 0.01, 0.2]

/** The exposition text of one registry, which is what Prometheus reads. */
async function exposition(registry: Registry): Promise<string> {
  return registry.metrics()
}

t.test('LatencyHistogram reads as prom-client’s Histogram does, with and without a label', async (t) => {
  const ours = new Registry()
  const theirs = new Registry()
  const plain = new LatencyHistogram('plain_seconds', 'help', BUCKETS, ours)
  const byKind = new LatencyHistogram('by_kind_seconds', 'help', BUCKETS, ours, {
    name: 'kind',
    values: ['a', 'b', 'c'],
  })
  const plainReference = new Histogram({ name: 'plain_seconds', help: 'help', buckets: BUCKETS, registers: [theirs] })
  const byKindReference = new Histogram({
    name: 'by_kind_seconds',
    help: 'help',
    buckets: BUCKETS,
    labelNames: ['kind'],
    registers: [theirs],
  })

  t.equal(
    await exposition(ours),
    await exposition(theirs),
    'the same before any observation (the unlabelled one at zero, no labelled series)',
  )
  for (const value of OBSERVED) {
    plain.observe(value)
    plainReference.observe(value)
    byKind.of('a').observe(value)
    byKindReference.labels('a').observe(value)
  }
  byKind.of('c').observe(0.3)
  byKindReference.labels('c').observe(0.3)
  t.equal(
    await exposition(ours),
    await exposition(theirs),
    'the same after observations (series b never observed, so absent)',
  )
  // As JSON: prom-client's own sum and count carry `exemplar: undefined`, which no reader sees.
  const asJson = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown
  t.same(
    asJson(await plain.get()),
    asJson(await plainReference.get()),
    'get() gives the same values, as the tests of the gateway read them',
  )
  t.same(asJson(await byKind.get()), asJson(await byKindReference.get()), 'with a label too')

  plain.reset()
  plainReference.reset()
  t.equal((await plain.get()).values.find((v) => v.metricName === 'plain_seconds_count')?.value, 0, 'reset empties it')
  t.throws(
    () => byKind.of('d'),
    /no series kind="d"/,
    'a label value it was not built with is an error, not a new series',
  )

  plain.observe(Number.NaN)
  plain.observe(Number.POSITIVE_INFINITY)
  t.equal(
    (await plain.get()).values.find((v) => v.metricName === 'plain_seconds_count')?.value,
    0,
    'NaN and Infinity are dropped',
  )
  t.match(await exposition(ours), /^plain_seconds_sum 0$/m, 'and the sum stays a number')
})

t.test('tallied counters: what the request path counted is on the next read, and only once', async (t) => {
  const metrics = createMetrics()
  const reference = new Registry()
  const requests = new Counter({
    name: 'tgw_http_requests_total',
    help: 'x',
    labelNames: ['kind', 'status_class'],
    registers: [reference],
  })

  const observations: [(typeof ROUTE_KINDS)[number], number][] = [
    ['proxy', 200],
    ['proxy', 204],
    ['proxy', 502],
    ['management', 404],
    ['none', 400],
    ['ops', 200],
    ['proxy', 101], // 1xx: its own class
  ]
  for (const [kind, status] of observations) {
    metrics.observeRequest(kind, status, 0.002)
    requests.labels(kind, `${Math.floor(status / 100)}xx`).inc()
  }
  const values = async (registry: Registry) =>
    (await registry.getSingleMetric('tgw_http_requests_total')!.get()).values.map((v) => [v.labels, v.value] as const)
  t.same(
    new Map((await values(metrics.registry)).map(([labels, value]) => [JSON.stringify(labels), value])),
    new Map((await values(reference)).map(([labels, value]) => [JSON.stringify(labels), value])),
    'the same series and counts as prom-client’s counter',
  )
  t.same(await values(metrics.registry), await values(metrics.registry), 'reading twice does not add twice')

  metrics.proxy.proxiedRequests.inc()
  metrics.proxy.proxiedRequests.inc()
  const proxied = async () =>
    (await metrics.registry.getSingleMetric('tgw_proxied_requests_total')!.get()).values[0]?.value
  t.equal(await proxied(), 2)
  metrics.proxy.proxiedRequests.inc()
  t.equal(await proxied(), 3, 'counts after a read are added to it')
  t.match(await metrics.registry.metrics(), /^tgw_proxied_requests_total 3$/m, 'and the scrape says so')

  metrics.proxy.proxiedRequests.inc()
  metrics.registry.resetMetrics()
  t.equal(await proxied(), 0, 'a reset also drops what was counted but not yet read')
})
