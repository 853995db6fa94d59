// Retries under load (docs/configuration.md, Retries), against four real upstreams on loopback: a
// steady one, a slow one, one flapping (three 503s, then three answers, over and over) and one
// killed partway (its connections reset, then refused). GETs and POSTs without Idempotency-Key in
// turn, eight at a time: every GET is answered, and no POST is sent twice (each upstream counts).
// A hung target (an upstream process stopped with SIGSTOP): the requests sent to it wait out
// timeout_ms and are not retried (no time is left), until passive health takes it out.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import t, { type Test } from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { echo, startUpstream, type UpstreamHandler } from '../helpers/upstream.js'

const PREFIX = '/v1/fleet'
const REQUESTS = 400
const CONCURRENCY = 8

t.test('GETs under load see no error while a target flaps, one is slow and one is killed', async (t) => {
  const steady = await startUpstream(t)
  const slow = await startUpstream(t, (request, response, received) => {
    setTimeout(() => echo(request, response, received), 20)
  })
  let flaps = 0
  const flapping: UpstreamHandler = (request, response, received) => {
    if (Math.floor(flaps++ / 3) % 2 === 0) response.writeHead(503).end()
    else echo(request, response, received)
  }
  const flapper = await startUpstream(t, flapping)
  const killed = await startUpstream(t)
  const upstreams = [steady, slow, flapper, killed]
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: PREFIX,
          targets: upstreams.map((u) => ({ url: u.url })),
          retries: { attempts: 3, on: ['connect_failure', 'reset', 502, 503, 504], budget_percent: 50 },
        },
      ],
    },
  })
  const parent = await gw.createParent()
  const body = randomBytes(500)
  const statuses: Record<string, number[]> = { GET: [], POST: [] }
  let sent = 0
  let done = 0
  let killing: Promise<void> | null = null
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < REQUESTS) {
        const method = sent++ % 2 === 0 ? 'GET' : 'POST'
        const res = await callAs(gw.url, parent.apiKey, {
          method,
          path: `${PREFIX}/x`,
          body: method === 'POST' ? body : undefined,
        })
        statuses[method]!.push(res.status)
        // A quarter in: the target is killed, requests in flight on it included.
        if (++done === REQUESTS / 4) killing = killed.close()
      }
    }),
  )
  await killing
  t.equal(statuses.GET!.length, REQUESTS / 2)
  t.same(
    statuses.GET!.filter((s) => s !== 200),
    [],
    'every GET answered 200',
  )
  const posts = upstreams.reduce((sum, u) => sum + u.received.filter((r) => r.method === 'POST').length, 0)
  t.equal(posts, REQUESTS / 2, 'each POST reached an upstream once: none sent twice')
  t.ok(
    statuses.POST!.every((s) => s === 200 || s === 502 || s === 503),
    `a POST fails only with its target's failure (${statuses.POST!.filter((s) => s !== 200).length} did)`,
  )
  t.ok(killed.received.length > 0 && flapper.received.length > 0, 'the failing targets had their share')
  t.ok(
    (await metricValue(gw.app, 'tgw_upstream_ejections_total', { route: PREFIX, target: killed.url })) >= 1,
    'passive health heard the attempts clients never saw fail, and took the killed target out',
  )
})

/** An upstream in a process of its own, answering 200 to everything: one a test can stop. */
async function processUpstream(t: Test): Promise<{ url: string; pid: number }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      "require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => s.end('ok')) })" +
        ".listen(0, '127.0.0.1', function () { console.log(this.address().port) })",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  t.teardown(() => {
    child.kill('SIGCONT')
    child.kill('SIGKILL')
  })
  const [line] = (await once(child.stdout!, 'data')) as [Buffer]
  return { url: `http://127.0.0.1:${Number(line.toString().trim())}`, pid: child.pid! }
}

t.test('a hung target: its requests wait out timeout_ms, unretried, until it is taken out', async (t) => {
  const good = await startUpstream(t)
  const hung = await processUpstream(t)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: PREFIX,
          targets: [{ url: good.url }, { url: hung.url }],
          balance: 'round_robin',
          timeout_ms: 1000,
          retries: { attempts: 2, on: ['connect_failure', 'reset', 502, 503, 504], budget_percent: 100 },
        },
      ],
    },
  })
  const parent = await gw.createParent()
  const get = async () => (await callAs(gw.url, parent.apiKey, { path: `${PREFIX}/x` })).status
  for (let i = 0; i < 4; i++) t.equal(await get(), 200, 'both answer')
  process.kill(hung.pid, 'SIGSTOP')
  const statuses: number[] = []
  for (let i = 0; i < 20; i++) statuses.push(await get())
  t.equal(statuses.filter((s) => s === 504).length, 5, 'five waited out timeout_ms (504), then it was out')
  t.same(statuses.slice(-10), Array(10).fill(200), 'after that every GET is answered')
  t.equal(
    await metricValue(gw.app, 'tgw_upstream_retries_total', { route: PREFIX }),
    0,
    'a timeout is not retried: its time is spent',
  )
})
