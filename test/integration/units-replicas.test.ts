// A meter over three replicas of one deployment (docs/api.md, Units), over real sockets to a real
// upstream and the real Postgres: 10^4 requests spread over the replicas, their units reported in
// a header or, streamed, in a trailer; once every replica has flushed, the meter holds exactly the
// sum the upstream reported, and the request units exactly the requests at the route's cost.
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { createSubAccount } from '../../src/store/tenants.js'
import { startReplicas } from '../helpers/gateway.js'
import { startUpstream } from '../helpers/upstream.js'

const REQUESTS = 10_000
const CONCURRENCY = 32

/** The units of the i-th request, as the upstream reports them (`?tokens=`): a header, or a trailer on /stream. */
function report(url: string, response: ServerResponse): void {
  const [path, query = ''] = url.split('?')
  const tokens = new URLSearchParams(query).get('tokens') ?? '0'
  if (path!.endsWith('/stream')) {
    response.writeHead(200, { 'content-type': 'text/event-stream', trailer: 'X-Tokens-Used' })
    response.write('data: a\n\n')
    response.addTrailers({ 'X-Tokens-Used': tokens })
    response.end('data: b\n\n')
    return
  }
  response.writeHead(200, { 'content-type': 'text/plain', 'x-tokens-used': tokens })
  response.end('ok')
}

const upstream = await startUpstream(t, (request, response) => report(request.url!, response))
const replicas = await startReplicas(t, 3, {
  gatewayConfig: {
    routes: [
      { prefix: '/llm', upstream: upstream.url, cost: 2, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const parent = await replicas[0]!.createParent({ name: 'P' })
const sub = await createSubAccount(replicas[0]!.database.sql, parent.id, { name: 'S', externalId: null, metadata: {} })

t.test(`${REQUESTS} requests over 3 replicas: the meter is the reported sum, exactly`, async (t) => {
  const pools = replicas.map((replica) => new Pool(replica.url, { connections: CONCURRENCY / 2 }))
  t.teardown(() => Promise.all(pools.map((pool) => pool.close())))
  let reported = 0
  let next = 0
  const worker = async () => {
    for (let i = next++; i < REQUESTS; i = next++) {
      const tokens = (i * 7919) % 5000
      reported += tokens
      const { statusCode, body, trailers } = await pools[i % pools.length]!.request({
        path: `/llm/${i % 4 === 0 ? 'stream' : 'complete'}?tokens=${tokens}`,
        method: 'GET',
        headers: { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': sub.id },
      })
      await body.text()
      if (statusCode !== 200) throw new Error(`request ${i}: ${statusCode}`)
      if (trailers['x-tokens-used'] !== undefined) throw new Error(`request ${i}: the trailer reached the client`)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  await Promise.all(replicas.map((replica) => replica.app.usageMeter.flush()))

  const [row] = await replicas[0]!.database.sql<{ tokens: string; units: string; requests: string }[]>`
    select sum(units) filter (where meter = 'tokens')::text as tokens,
           sum(units) filter (where meter = 'requests')::text as units,
           sum(requests) filter (where meter = 'tokens')::text as requests
    from usage_period_units where tenant_id = ${sub.id}`
  t.equal(Number(row!.tokens), reported, 'tokens: the sum the upstream reported')
  t.equal(Number(row!.requests), REQUESTS, 'every request reported once')
  t.equal(Number(row!.units), REQUESTS * 2, 'request units: each request at cost 2')
})
