// Retries under load (docs/configuration.md, Retries), against four real upstreams on loopback: a
// steady one, a slow one, one flapping (three 503s, then three answers, over and over) and one
// killed partway (its connections reset, then refused). GETs and POSTs without Idempotency-Key in
// turn, eight at a time: every GET is answered, and no POST is sent twice (each carries an id,
// which the upstream that reads it records).
// A hung target (an upstream process stopped with SIGSTOP): without per_try_timeout_ms the
// requests sent to it wait out timeout_ms and are not retried (no time is left), until passive
// health takes it out; with it, each attempt there is given up after per_try_timeout_ms and a GET
// goes on to another target, while a POST without Idempotency-Key gets the 504.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import t, { type Test } from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
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
  /** Each POST's status, by the id in its query, which the upstream that reads it records. */
  const postStatus = new Map<string, number>()
  let sent = 0
  let done = 0
  let killing: Promise<void> | null = null
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < REQUESTS) {
        const n = sent++
        const method = n % 2 === 0 ? 'GET' : 'POST'
        const res = await callAs(gw.url, parent.apiKey, {
          method,
          path: `${PREFIX}/x?n=${n}`,
          body: method === 'POST' ? body : undefined,
        })
        statuses[method]!.push(res.status)
        if (method === 'POST') postStatus.set(`${PREFIX}/x?n=${n}`, res.status)
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
  // Each upstream records the POSTs it read whole, by their ids. A POST cut on the killed target
  // may never have been read whole (nor recorded) there; none may arrive twice, and each answered
  // 200 arrived once.
  const arrivals = new Map<string, number>()
  for (const u of upstreams)
    for (const r of u.received) if (r.method === 'POST') arrivals.set(r.url, (arrivals.get(r.url) ?? 0) + 1)
  t.same(
    [...arrivals].filter(([, times]) => times > 1),
    [],
    `no POST reached the upstreams twice (${arrivals.size} of ${postStatus.size} arrived)`,
  )
  t.ok(
    [...arrivals.keys()].every((id) => postStatus.has(id)),
    'every POST that arrived is one the test sent',
  )
  t.same(
    [...postStatus].filter(([id, status]) => status === 200 && arrivals.get(id) !== 1),
    [],
    'each POST answered 200 arrived once',
  )
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

/**
 * An upstream in a process of its own, answering 200 to everything: one a test can stop. Its
 * `received` lists each request it read, as `METHOD url` (a stopped one reads them once continued).
 */
async function processUpstream(t: Test): Promise<{ url: string; pid: number; received: string[] }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      'require(\'node:http\').createServer((q, s) => { console.log(q.method + " " + q.url); q.resume(); ' +
        "q.on('end', () => s.end('ok')) }).listen(0, '127.0.0.1', function () { console.log(this.address().port) })",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  t.teardown(() => {
    child.kill('SIGCONT')
    child.kill('SIGKILL')
  })
  const lines = createInterface({ input: child.stdout! })
  const [port] = (await once(lines, 'line')) as [string]
  const received: string[] = []
  lines.on('line', (line) => received.push(line))
  return { url: `http://127.0.0.1:${Number(port)}`, pid: child.pid!, received }
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

t.test('a hung target under load, with per_try_timeout_ms: GETs see no error, no POST goes twice', async (t) => {
  const steady = await startUpstream(t)
  const slow = await startUpstream(t, (request, response, received) => {
    setTimeout(() => echo(request, response, received), 20)
  })
  const hung = await processUpstream(t)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: PREFIX,
          targets: [{ url: steady.url }, { url: slow.url }, { url: hung.url }],
          balance: 'round_robin',
          timeout_ms: 3000,
          retries: {
            attempts: 2,
            on: ['connect_failure', 'reset', 502, 503, 504],
            budget_percent: 100,
            per_try_timeout_ms: 250,
          },
        },
      ],
    },
  })
  const parent = await gw.createParent()
  const { values } = await gw.app.metrics.registry.getSingleMetric('tgw_upstream_retries_total')!.get()
  t.ok(
    values.some((v) => v.labels.route === PREFIX && v.labels.reason === 'per_try_timeout' && v.value === 0),
    'its per_try_timeout series shows from the start, at 0',
  )
  for (let i = 0; i < 6; i++)
    t.equal((await callAs(gw.url, parent.apiKey, { path: `${PREFIX}/x` })).status, 200, 'all three answer')
  const heardBefore = hung.received.length
  process.kill(hung.pid, 'SIGSTOP')
  const body = randomBytes(500)
  const statuses: Record<string, number[]> = { GET: [], POST: [] }
  const timeoutProblems: string[] = []
  let sent = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < REQUESTS / 2) {
        const n = sent++
        const method = n % 2 === 0 ? 'GET' : 'POST'
        const res = await callAs(gw.url, parent.apiKey, {
          method,
          path: `${PREFIX}/x?n=${n}`,
          body: method === 'POST' ? body : undefined,
        })
        statuses[method]!.push(res.status)
        if (res.status === 504) timeoutProblems.push(res.body)
      }
    }),
  )
  const perTryRetries = await metricValue(gw.app, 'tgw_upstream_retries_total', {
    route: PREFIX,
    reason: 'per_try_timeout',
  })
  const gatewayTimeouts = statuses.GET!.concat(statuses.POST!).filter((s) => s === 504).length
  // Continued, the hung target reads what each given-up attempt had sent it: every one of them
  // was retried (per_try_timeout) or answered 504.
  process.kill(hung.pid, 'SIGCONT')
  t.ok(
    await until(10_000, async () => hung.received.length === heardBefore + perTryRetries + gatewayTimeouts),
    `the hung target read every attempt given up on it (${hung.received.length - heardBefore})`,
  )
  const postsSent = [...hung.received, ...[steady, slow].flatMap((u) => u.received.map((r) => `${r.method} ${r.url}`))]
    .filter((line) => line.startsWith('POST '))
    .sort()
  t.same(postsSent, [...new Set(postsSent)], 'no POST reached the upstreams twice, the hung target included')
  t.same(
    statuses.GET!.filter((s) => s !== 200),
    [],
    'every GET answered 200: none waited out timeout_ms on the hung target',
  )
  const posts = [steady, slow].reduce((sum, u) => sum + u.received.filter((r) => r.method === 'POST').length, 0)
  const answered = statuses.POST!.filter((s) => s === 200).length
  t.equal(posts, answered, 'each POST answered 200 reached one upstream once; none given up on the hung one went again')
  t.ok(
    statuses.POST!.every((s) => s === 200 || s === 504),
    `a POST fails only with a 504, when it went to the hung target (${REQUESTS / 4 - answered} did)`,
  )
  t.ok(
    timeoutProblems.every((problem) => problem.includes('did not answer within 250 ms')),
    `each 504 names the time its attempt had: per_try_timeout_ms (${timeoutProblems[0]})`,
  )
  t.ok(perTryRetries >= 1, 'GETs given up on the hung target were retried, as per_try_timeout')
  t.ok(
    (await metricValue(gw.app, 'tgw_upstream_ejections_total', { route: PREFIX, target: hung.url })) >= 1,
    'passive health counted each given-up attempt and took the hung target out',
  )
})
