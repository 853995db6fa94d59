// The browser's credential as a subprotocol (docs/api.md, WebSockets), as plain functions: what
// is taken out of Sec-WebSocket-Protocol, and what the client is answered.
import t from 'tap'
import { answeredProtocol, offeredProtocols, subprotocolListProblem } from '../../src/proxy/websocket/subprotocols.js'
import { asksForWebSocket } from '../../src/http/upgrade-request.js'

t.test('the tgw.bearer. entry is the credential; the rest is offered upstream, in order', async (t) => {
  t.same(offeredProtocols('tgw.bearer.tgw_abc, chat.v2, chat.v1'), {
    credential: 'tgw_abc',
    bearerEntries: 1,
    application: ['chat.v2', 'chat.v1'],
  })
  t.same(
    offeredProtocols(['chat.v1', 'tgw.bearer.a.b.c']),
    {
      credential: 'a.b.c',
      bearerEntries: 1,
      application: ['chat.v1'],
    },
    'repeated headers, and a token with dots',
  )
  t.same(offeredProtocols(undefined), { credential: null, bearerEntries: 0, application: [] }, 'none')
  t.same(
    offeredProtocols(' , chat ,'),
    { credential: null, bearerEntries: 0, application: ['chat'] },
    'empty entries dropped',
  )
  t.equal(offeredProtocols('tgw.bearer.a, tgw.bearer.b').bearerEntries, 2, 'two are counted (and refused)')
})

t.test("the client is answered the upstream's choice, or its lone credential entry", async (t) => {
  const offered = new Set(['tgw.bearer.k', 'chat.v2', 'chat.v1'])
  t.equal(answeredProtocol(offered, 'chat.v1'), 'chat.v1', "the upstream's choice")
  t.equal(answeredProtocol(offered, 'other'), false, 'never one the client did not offer')
  t.equal(answeredProtocol(offered, ''), false, 'none chosen among several: none')
  t.equal(answeredProtocol(new Set(['tgw.bearer.k']), ''), 'tgw.bearer.k', 'the credential alone: itself')
  t.equal(answeredProtocol(new Set(['chat']), ''), false, 'an application protocol alone, not chosen: none')
})

t.test('Upgrade: websocket, as a token list in any case', async (t) => {
  t.ok(asksForWebSocket('websocket'))
  t.ok(asksForWebSocket('WebSocket'))
  t.ok(asksForWebSocket('h2c, websocket'))
  t.notOk(asksForWebSocket('h2c'))
  t.notOk(asksForWebSocket('websockets'))
  t.notOk(asksForWebSocket(undefined))
})

t.test("a subprotocol list ws could not read is told apart, by each entry's place", async (t) => {
  t.equal(subprotocolListProblem(undefined), null, 'none offered')
  t.equal(subprotocolListProblem('tgw.bearer.tgw_abc, chat.v2,chat.v1 '), null, 'tokens, spaces around commas')
  t.equal(subprotocolListProblem(['chat.v1', 'tgw.bearer.a.b.c']), null, 'repeated headers')
  t.match(subprotocolListProblem('chat, chat'), /entry 2 repeats entry 1/)
  t.match(subprotocolListProblem(['chat', 'chat']), /entry 2 repeats entry 1/, 'across repeated headers')
  t.match(subprotocolListProblem('a,,b'), /entry 2 is empty/)
  t.match(subprotocolListProblem(' , chat'), /entry 1 is empty/)
  for (const bad of ['a b', 'a/b', '"x"', 'chat\u00a0', 'x;y', 'é'])
    t.match(subprotocolListProblem(`ok, ${bad}`), /entry 2 is not a subprotocol name/, JSON.stringify(bad))
  t.notMatch(subprotocolListProblem('tgw.bearer.secret value'), /secret/, 'an entry is never quoted')
})
