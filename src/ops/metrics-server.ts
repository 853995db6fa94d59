// The metrics listener (docs/operations.md): `GET /metrics` on METRICS_PORT, never on the public
// port, and the health paths beside it. Apart from ops/metrics.ts, which defines what is counted:
// this is the HTTP plumbing main.ts starts, and knows nothing of the metrics it serves.
import { createServer, type Server } from 'node:http'
import { Registry } from 'prom-client'

/** What a scrape is answered from: a registry's text and its content type. */
type Exposition = { metrics(): Promise<string>; readonly contentType: string }
/** A registered metric as the registry reads it (prom-client's own and fast-metrics.ts's). */
type ReadableMetric = { name: string; get(): Promise<{ name: string; type: string }> }

/** What the metrics listener answers for the health paths: the public app's own answer. */
export type ProbeAnswer = (path: '/healthz' | '/readyz') => Promise<{
  statusCode: number
  headers: Record<string, unknown>
  body: string
}>

/**
 * The same metrics in the OpenMetrics exposition, which alone carries exemplars (the request
 * duration's trace ids). prom-client renders a registry in one format, and renaming a counter for
 * OpenMetrics (its `_total` goes to the sample) on the metric itself would change the Prometheus
 * text too: each metric is read through a stand-in that carries the OpenMetrics name.
 */
function openMetricsView(registry: Registry): Exposition {
  // prom-client's types omit the constructor's content type.
  const OpenMetricsRegistry = Registry as unknown as new (contentType: string) => Registry
  const view = new OpenMetricsRegistry(Registry.OPENMETRICS_CONTENT_TYPE)
  for (const metric of registry.getMetricsAsArray() as unknown as ReadableMetric[]) {
    const get = async () => {
      const read = await metric.get()
      return read.type === 'counter' ? { ...read, name: read.name.replace(/_total$/, '') } : read
    }
    view.registerMetric({ name: metric.name, get } as unknown as Parameters<Registry['registerMetric']>[0])
  }
  return view
}

/** Whether a scraper's Accept names the OpenMetrics text format (Prometheus asks for it first). */
function acceptsOpenMetrics(accept: string | undefined): boolean {
  return accept?.includes('application/openmetrics-text') === true
}

/**
 * `GET /metrics` on its own port (docs/configuration.md: never on the public one), and the health
 * paths too when `probe` is given (docs/operations.md): the kubelet's probes then do not compete
 * with clients for the public listener's connections, which MAX_CONNECTIONS caps.
 */
export async function serveMetrics(
  registry: Registry,
  port: number,
  host: string,
  probe?: ProbeAnswer,
  /** Answer a scraper that asks for OpenMetrics in it (tracing on: the exemplars' format). */
  openMetrics = false,
): Promise<Server> {
  const server = createServer((request, response) => {
    const path = request.url?.split('?')[0]
    if (request.method === 'GET' && probe !== undefined && (path === '/healthz' || path === '/readyz')) {
      probe(path).then(
        (answer) => {
          const type = answer.headers['content-type']
          response
            .writeHead(answer.statusCode, typeof type === 'string' ? { 'content-type': type } : {})
            .end(answer.body)
        },
        () => response.writeHead(500).end(),
      )
      return
    }
    if (request.method !== 'GET' || path !== '/metrics') {
      response.writeHead(404).end()
      return
    }
    // Built at each scrape: a metric registered since (a plugin's) is in it.
    const exposed: Exposition =
      openMetrics && acceptsOpenMetrics(request.headers.accept) ? openMetricsView(registry) : registry
    exposed.metrics().then(
      (text) => response.writeHead(200, { 'content-type': exposed.contentType }).end(text),
      () => response.writeHead(500).end(),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  return server
}
