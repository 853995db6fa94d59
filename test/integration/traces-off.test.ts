// Tracing off, no OTLP endpoint (docs/operations.md, Traces: off, and free): a gateway serving a
// proxied request loads none of the OpenTelemetry SDK and gives the request no trace. Every module
// this process resolves is watched (node:module's registerHooks, set before anything is imported),
// and a tracing gateway started last shows that the watch sees the SDK when it is loaded. The API
// alone (@opentelemetry/api, no-ops until an SDK registers) is prom-client's own dependency, loaded
// by its process CPU metric whatever we do: not counted.
import { registerHooks } from 'node:module'
import t from 'tap'

const resolved: string[] = []
registerHooks({
  resolve(specifier, context, next) {
    const result = next(specifier, context)
    const url = result.url
    if (url.includes('/@opentelemetry/') && !url.includes('/@opentelemetry/api/')) resolved.push(url)
    return result
  },
})
const { startGateway } = await import('../helpers/gateway.js')
const { callAs } = await import('../helpers/http.js')
const { startUpstream } = await import('../helpers/upstream.js')

const upstream = await startUpstream(t)
const routes = { routes: [{ prefix: '/api', upstream: upstream.url }] }

t.test('off: a proxied request, and not one module of the SDK loaded', async (t) => {
  const gateway = await startGateway(t, { gatewayConfig: routes })
  const parent = await gateway.createParent()
  const res = await callAs(gateway.url, parent.apiKey, { path: '/api/off' })
  t.equal(res.status, 200)
  t.equal(upstream.received.at(-1)!.headers.traceparent, undefined, 'no traceparent sent')
  t.same(resolved, [], 'no module of the SDK resolved')
})

t.test('on: the same watch sees the SDK loaded', async (t) => {
  await startGateway(t, { gatewayConfig: routes, env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' } })
  t.ok(
    resolved.some((url) => url.includes('/@opentelemetry/sdk-trace/')),
    `the SDK resolved (${resolved.length} modules)`,
  )
})
