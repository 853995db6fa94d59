// An early answer is the answer (docs/api.md, "What comes back"): an upstream that answers before
// it has read the whole request body (a 413, a 401, a redirect) and then closes its connection
// gives the client that answer, whatever the body's size, never a 502; usage and the request log
// record the upstream's status. The upstream is a raw socket server that reads the request's head,
// writes its answer, and closes: with a FIN, or at once with the body unread (a reset). The client
// uploads 8 MB, the race undici lost 2–4 times in 5, so each case runs RUNS times.
import { request as httpRequest } from 'node:http'
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const RUNS = 10
const BODY_BYTES = 8 * 1024 * 1024

const ANSWERS: Record<string, { status: number; head: string }> = {
  '/too-large': { status: 413, head: 'HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain' },
  '/unauthorized': {
    status: 401,
    head: 'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic\r\nContent-Type: text/plain',
  },
  '/moved': {
    status: 307,
    head: 'HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\nContent-Type: text/plain',
  },
}

/**
 * How the upstream closes once it answered: a FIN after its answer, or at once (a reset, the body
 * unread), its answer saying `Connection: close` or not (`reset-unannounced`).
 */
type Close = 'end' | 'destroy' | 'reset-unannounced'

const upstream = createServer((socket: Socket) => {
  socket.on('error', () => {})
  let head = ''
  const onData = (chunk: Buffer) => {
    head += chunk.toString('latin1')
    const end = head.indexOf('\r\n\r\n')
    if (end === -1) return
    socket.off('data', onData)
    const target = head.slice(0, end).split(' ', 2)[1]!
    const [path, close] = target.split('?') as [string, Close]
    const answer = ANSWERS[path.replace(/^\/early/, '')] ?? ANSWERS['/too-large']!
    const body = `refused early: ${answer.status}`
    const connection = close === 'reset-unannounced' ? '' : 'Connection: close\r\n'
    const bytes = `${answer.head}\r\nContent-Length: ${body.length}\r\n${connection}\r\n${body}`
    if (close !== 'end') {
      // Closed with the body unread: the kernel answers with a reset right after the answer.
      socket.pause()
      socket.write(bytes, () => socket.destroy())
    } else socket.end(bytes)
  }
  socket.on('data', onData)
})
const { port } = await listenOnLoopback(t, upstream)
const gw = await startGateway(t, {
  usageFlushIntervalMs: 100,
  gatewayConfig: {
    routes: [{ prefix: '/early', upstream: `http://127.0.0.1:${port}`, max_body_bytes: 64 * 1024 * 1024 }],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write'] })
const created = await callAs(gw.url, parent.apiKey, {
  method: 'POST',
  path: '/v1/sub-accounts',
  acting: 'self',
  json: { name: 'uploader' },
})
const sub = created.json().id as string
const body = Buffer.alloc(BODY_BYTES, 0x61)

/** An 8 MB upload to `path`: the status the client got, or the error its request failed with. */
function upload(path: string): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    const request = httpRequest(
      {
        host: '127.0.0.1',
        port: gw.port,
        method: 'POST',
        path,
        agent: false,
        headers: {
          authorization: `Bearer ${parent.apiKey}`,
          'x-service-acting-tenant': sub,
          'content-type': 'application/octet-stream',
          'content-length': String(BODY_BYTES),
        },
      },
      (response) => {
        let text = ''
        response.setEncoding('utf8')
        response.on('data', (chunk: string) => (text += chunk))
        response.on('end', () => resolve({ status: response.statusCode!, body: text }))
        response.on('error', (err) => resolve({ error: err.message }))
      },
    )
    request.on('error', (err) => resolve({ error: `${(err as NodeJS.ErrnoException).code ?? ''} ${err.message}` }))
    request.end(body)
  })
}

for (const [path, { status }] of Object.entries(ANSWERS)) {
  for (const close of ['end', 'destroy', 'reset-unannounced'] as const) {
    t.test(`an early ${status}, then the upstream closes (${close}): the client gets the ${status}`, async (t) => {
      const got: string[] = []
      for (let i = 0; i < RUNS; i++) {
        const res = await upload(`/early${path}?${close}`)
        got.push('status' in res ? String(res.status) : res.error)
        if ('status' in res) t.equal(res.body, `refused early: ${status}`, `run ${i + 1}: the upstream's body`)
      }
      t.same(got, Array(RUNS).fill(String(status)), `${RUNS} of ${RUNS} runs: ${status}`)
    })
  }
}

t.test("usage and the request log record the upstream's status", async (t) => {
  // 413 and 401, each closed the three ways, RUNS times; 307 the same.
  const want = { '2xx': 0, '3xx': 3 * RUNS, '4xx': 6 * RUNS, '5xx': 0 }
  const byStatus = async () => {
    const res = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/usage', acting: 'self' })
    return (res.json().data as { sub_account_id: string; by_status: typeof want }[]).find(
      (e) => e.sub_account_id === sub,
    )?.by_status
  }
  await eventually(10_000, async () => JSON.stringify(await byStatus()) === JSON.stringify(want))
  t.same(await byStatus(), want, 'usage: each by its upstream status, no 5xx')

  await gw.app.requestLog!.flush()
  const statuses: number[] = []
  for (let cursor: string | null = null, pages = 0; pages === 0 || (cursor !== null && pages < 10); pages++) {
    const page = await callAs(gw.url, parent.apiKey, {
      path: `/v1/sub-accounts/requests?sub_account_id=${sub}&limit=100${cursor === null ? '' : `&cursor=${cursor}`}`,
      acting: 'self',
    })
    t.equal(page.status, 200, page.body.slice(0, 200))
    statuses.push(...(page.json().data as { status: number }[]).map((r) => r.status))
    cursor = (page.json().next_cursor as string | null | undefined) ?? null
  }
  t.same(
    [...statuses].sort(),
    [...Array(3 * RUNS).fill(307), ...Array(3 * RUNS).fill(401), ...Array(3 * RUNS).fill(413)].sort(),
    "the request log: each with its upstream's status",
  )
})
