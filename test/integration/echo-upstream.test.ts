// `npm run echo-upstream` (scripts/echo-upstream.ts), the README quickstart's upstream, run as
// the README runs it, behind a real gateway: it answers with the method, the path and the
// X-Service-* headers it received, and says that no Authorization reached it; `?tokens=N` is
// reported as X-Tokens-Used.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { closedPort } from '../helpers/upstream.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.test(
  'npm run echo-upstream behind the gateway: the method, the path, the trusted headers, no Authorization',
  async (t) => {
    const echoPort = await closedPort()
    const echo = spawn('npm', ['run', '--silent', 'echo-upstream'], {
      cwd: REPO_ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ECHO_PORT: String(echoPort) },
    })
    t.teardown(async () => {
      try {
        process.kill(-echo.pid!, 'SIGTERM')
      } catch {
        return // already gone
      }
      await once(echo, 'exit')
    })
    let out = ''
    echo.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
    t.ok(
      await until(30_000, async () => out.includes('echo upstream listening')),
      `it says where it listens: ${JSON.stringify(out)}`,
    )
    t.equal(out, `echo upstream listening on http://127.0.0.1:${echoPort}\n`, 'one line, with its address')

    const gw = await startGateway(t, { upstreamUrl: `http://127.0.0.1:${echoPort}` })
    const parent = await gw.createParent()

    const created = await gw.call(parent.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: 'Acme EU', external_id: 'acme-eu' },
    })
    t.equal(created.statusCode, 201, created.body)
    const sub = created.json() as { id: string }

    const response = await fetch(`${gw.url}/v1/shipments?page=2`, {
      method: 'DELETE',
      headers: {
        authorization: `Bearer ${parent.apiKey}`,
        'x-service-acting-tenant': 'ext:acme-eu',
        'x-service-resolved-tenant': 'forged',
      },
    })
    t.equal(response.status, 200)
    t.match(response.headers.get('content-type'), /^application\/json/)
    const body = (await response.json()) as Record<string, unknown>
    t.same(
      body,
      {
        method: 'DELETE',
        path: '/v1/shipments?page=2',
        'x-service-headers': {
          'x-service-resolved-tenant': sub.id,
          'x-service-caller-tenant': parent.id,
          'x-service-key-id': parent.keyId,
          'x-service-scopes': 'sub_accounts:read sub_accounts:write',
        },
        'x-request-id': response.headers.get('x-request-id'),
        authorization_received: false,
      },
      'exactly what the gateway sent: the forged header dropped, the trusted ones set',
    )

    // `?tokens=N` is reported as X-Tokens-Used, for a meter to count (docs/billing.md's example).
    const reported = await fetch(`http://127.0.0.1:${echoPort}/llm/chat?tokens=300`)
    t.equal(reported.headers.get('x-tokens-used'), '300')
    await reported.text()
    for (const query of ['', '?tokens=', '?tokens=-1', '?tokens=1e3']) {
      const plain = await fetch(`http://127.0.0.1:${echoPort}/llm/chat${query}`)
      t.equal(plain.headers.get('x-tokens-used'), null, `${query || 'no query'}: none`)
      await plain.text()
    }
  },
)
