// The metrics listener (docs/operations.md): `GET /metrics` on METRICS_PORT, never on the public
// port, and the health paths beside it. Apart from ops/metrics.ts, which defines what is counted:
// this is the HTTP plumbing main.ts starts, and knows nothing of the metrics it serves.
import { createServer, type Server } from 'node:http'
import type { Registry } from 'prom-client'

/** What the metrics listener answers for the health paths: the public app's own answer. */
export type ProbeAnswer = (path: '/healthz' | '/readyz') => Promise<{
  statusCode: number
  headers: Record<string, unknown>
  body: string
}>

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
    registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => response.writeHead(500).end(),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  return server
}
