// The front door's choice (src/proxy/front-door.ts): which requests it serves and which it leaves to
// fastify, on a plain Node server whose own handler stands for fastify's. The answers themselves
// are compared with fastify's in test/integration/proxy-front-door.test.ts.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance, onRequestHookHandler, RouteOptions } from 'fastify'
import t from 'tap'
import { request } from 'undici'
import { FrontDoor, type FrontDoorOptions } from '../../src/proxy/front-door.js'
import type { TestLike } from '../helpers/test-like.js'

const pass: onRequestHookHandler = (_request, _reply, done) => done()

/** A route as fastify's onRoute hook gives it: a proxy route carries its door. */
function route(method: string | string[], url: string, door: boolean): RouteOptions {
  const config = door
    ? {
        door: {
          checks: pass,
          forward: (_request: unknown, reply: { raw: ServerResponse }) => reply.raw.end('door'),
        },
      }
    : {}
  return { method, url, config, handler: () => {} } as unknown as RouteOptions
}

/** A server with `door` in front of a handler that answers 'fastify'; closed with the test. */
async function serve(
  t: TestLike,
  door: FrontDoor,
  overrides: Partial<FrontDoorOptions> = {},
  logged: string[] = [],
): Promise<(method: string, path: string, body?: string) => Promise<string>> {
  const server = createServer((_req: IncomingMessage, res: ServerResponse) => res.end('fastify'))
  const log = { error: (_fields: unknown, message: string) => logged.push(message) }
  const app = { log, childLoggerFactory: () => log } as unknown as FastifyInstance
  const options: FrontDoorOptions = {
    guards: pass,
    answerError: (error, _request, reply) => reply.raw.writeHead(500).end(`refused: ${error.message}`),
    account: () => {},
    makeRequestId: () => 'id',
    draining: () => false,
    ...overrides,
  }
  door.install(server, app, options)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const { port } = server.address() as AddressInfo
  return async (method, path, body) => {
    const answer = await request(`http://127.0.0.1:${port}${path}`, {
      method: method as 'GET',
      ...(body === undefined ? {} : { body }),
    })
    return `${answer.statusCode === 200 ? '' : `${answer.statusCode} `}${await answer.body.text()}`
  }
}

/** A door with one proxy route, /v1/things/*, whose steps and handler are given. */
function doorWith(checks: onRequestHookHandler, forward: (request: unknown, reply: { raw: ServerResponse }) => void) {
  const door = new FrontDoor({ maxParamLength: 100 })
  door.mirror({ method: 'GET', url: '/v1/things/*', config: { door: { checks, forward } }, handler: () => {} } as never)
  return door
}

const throws = () => {
  throw new Error('a bug')
}

t.test('a throw anywhere on the way is answered by the error handler, as fastify answers a bug', async (t) => {
  const ok = (_request: unknown, reply: { raw: ServerResponse }) => reply.raw.end('door')
  const inGuards = await serve(t, doorWith(pass, ok), { guards: throws })
  t.equal(await inGuards('GET', '/v1/things/1'), '500 refused: a bug', 'in the guards')
  const inChecks = await serve(t, doorWith(throws, ok))
  t.equal(await inChecks('GET', '/v1/things/1'), '500 refused: a bug', 'in the steps')
  const refusing = await serve(
    t,
    doorWith((_r, _p, done) => done(new Error('no')), ok),
  )
  t.equal(await refusing('GET', '/v1/things/1'), '500 refused: no', 'a refusal')
  const inForward = await serve(t, doorWith(pass, throws))
  t.equal(await inForward('GET', '/v1/things/1'), '500 refused: a bug', 'in the handler')
})

t.test('an error handler or accounting that fails is logged, and the answer still ends', async (t) => {
  const logged: string[] = []
  const failing = await serve(
    t,
    doorWith(throws, () => {}),
    { answerError: throws },
    logged,
  )
  t.equal(await failing('GET', '/v1/things/1'), '500 ', 'a bare 500')
  const ok = (_request: unknown, reply: { raw: ServerResponse }) => reply.raw.end('door')
  const unaccounted = await serve(t, doorWith(pass, ok), { account: throws }, logged)
  t.equal(await unaccounted('GET', '/v1/things/1'), 'door')
  t.same(logged, ['the error answer failed', 'request accounting failed'])
})

t.test('the door takes bodiless requests on proxy routes, and leaves the rest to fastify', async (t) => {
  const door = new FrontDoor({ maxParamLength: 100 })
  for (const url of ['/v1/things', '/v1/things/', '/v1/things/*'])
    door.mirror(route(['GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS'], url, true))
  // The gateway's own routes, for one method each: the door leaves their paths alone for all.
  door.mirror(route('POST', '/v1/things/special', false))
  door.mirror(route('GET', '/v1/things/:id/report', false))
  door.mirror(route('GET', '/v1/things/:id/report', false))
  const send = await serve(t, door)
  t.equal(await send('GET', '/v1/things/1'), 'door')
  t.equal(await send('DELETE', '/v1/things'), 'door')
  t.equal(await send('OPTIONS', '/v1/things/'), 'door')
  t.equal(await send('GET', '/v1/things/special'), 'fastify', "another route's path, for any method")
  t.equal(await send('GET', '/v1/things/7/report'), 'fastify', "another route's parametric path")
  t.equal(await send('POST', '/v1/things/1', 'a body'), 'fastify', 'a body')
  t.equal(await send('PATCH', '/v1/things/1'), 'fastify', 'a method that may carry a body')
  t.equal(await send('GET', '/v1/th%69ngs/1'), 'fastify', 'a percent-encoding')
  t.equal(await send('GET', '/v1/things/1?a;b'), 'fastify', 'a semicolon')
  t.equal(await send('GET', '/elsewhere'), 'fastify', 'no route at all')
  t.equal(door.served, 3)
  door.close()
  t.equal(await send('GET', '/v1/things/1'), 'fastify', 'a closing server: fastify serves all')
})

t.test('routes the mirror cannot tell apart close the door for good', async (t) => {
  const door = new FrontDoor({ maxParamLength: 100 })
  door.mirror(route('GET', '/v1/things/*', true))
  door.mirror(route('GET', '/v1/things/*', true))
  const send = await serve(t, door)
  t.equal(await send('GET', '/v1/things/1'), 'fastify')
  t.equal(door.served, 0)
})

t.test('a proxy route without a bodiless method is not mirrored', async (t) => {
  const door = new FrontDoor({ maxParamLength: 100 })
  door.mirror(route(['POST', 'PUT'], '/v1/things/*', true))
  const send = await serve(t, door)
  t.equal(await send('GET', '/v1/things/1'), 'fastify')
})
