// A collector that is down, hangs or refuses (docs/operations.md, Traces): under load every request
// is answered as without tracing, the spans lost are counted in tgw_trace_spans_dropped_total, and
// the gateway's stop ends though the last spans cannot be sent (their wait is bounded).
import t from 'tap'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { type CollectorMode, startCollector } from '../helpers/otlp-collector.js'
import type { TestLike } from '../helpers/test-like.js'
import { REFUSED_URL, startUpstream } from '../helpers/upstream.js'

const REQUESTS = 300
const CONCURRENCY = 30

const upstream = await startUpstream(t)

/** A gateway tracing every request to `endpoint`, with a small queue and a short export timeout. */
async function gatewayTracingTo(t: TestLike, endpoint: string, exportTimeoutMs: number): Promise<TestGateway> {
  return startGateway(t, {
    gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
    // The stop waits this long for the last spans, then lets them go.
    traceFlushBoundMs: 200,
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_TRACES_SAMPLER: 'always_on',
      OTEL_BSP_SCHEDULE_DELAY: '10',
      OTEL_BSP_MAX_QUEUE_SIZE: '16',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '8',
      OTEL_EXPORTER_OTLP_TIMEOUT: String(exportTimeoutMs),
      OTEL_BSP_EXPORT_TIMEOUT: String(exportTimeoutMs),
    },
  })
}

/** `REQUESTS` proxied requests, `CONCURRENCY` at a time: their statuses. */
async function load(gw: TestGateway, key: string, tag: string): Promise<number[]> {
  const statuses: number[] = []
  let next = 0
  const worker = async () => {
    while (next < REQUESTS) {
      const i = next++
      statuses.push((await callAs(gw.url, key, { path: `/api/${tag}/${i}` })).status)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return statuses
}

async function dropped(gw: TestGateway): Promise<number> {
  const metric = await gw.app.metrics.registry.getSingleMetric('tgw_trace_spans_dropped_total')!.get()
  return metric.values.reduce((sum, value) => sum + value.value, 0)
}

/** The hanging collector's exports (and the processor's wait for them) take 10 minutes: only the stop's own bound lets it end. */
const FAULTS: { name: string; mode: CollectorMode | 'down'; exportTimeoutMs: number }[] = [
  { name: 'down (connections refused)', mode: 'down', exportTimeoutMs: 300 },
  { name: 'hanging (never answers)', mode: 'hang', exportTimeoutMs: 600_000 },
  { name: 'refusing (400 to every export)', mode: 'refuse', exportTimeoutMs: 300 },
]

for (const { name, mode, exportTimeoutMs } of FAULTS)
  t.test(`a collector ${name}: every request answered, the spans lost counted, the stop ends`, async (t) => {
    const endpoint = mode === 'down' ? REFUSED_URL : (await startCollector(t, mode)).url
    const gw = await gatewayTracingTo(t, endpoint, exportTimeoutMs)
    const parent = await gw.createParent()
    const before = upstream.received.length
    const statuses = await load(gw, parent.apiKey, mode)
    t.same(
      statuses.filter((status) => status !== 200),
      [],
      `all ${REQUESTS} answered 200`,
    )
    t.equal(upstream.received.length - before, REQUESTS, 'and every one reached the upstream')
    t.ok(await until(30_000, async () => (await dropped(gw)) > 0), `spans lost are counted (${await dropped(gw)})`)
    // The stop does not wait on the collector past its bound (a close that hung would fail here,
    // naming what it waits on: test/helpers/gateway.ts).
    await gw.close()
    t.pass('the gateway stopped')
  })
