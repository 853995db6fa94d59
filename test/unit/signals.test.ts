// The stop rules (src/signals.ts, docs/operations.md): what each signal or error does while the
// gateway serves and while it drains, on a clock the test moves.
import t from 'tap'
import { RELAYED_WITHIN_MS, StopRules } from '../../src/signals.js'

function rules(): { rules: StopRules; at(ms: number): void } {
  let now = 1_000_000
  const made = new StopRules(() => now)
  return { rules: made, at: (ms) => (now = 1_000_000 + ms) }
}

const term = { kind: 'signal', name: 'SIGTERM' } as const
const int = { kind: 'signal', name: 'SIGINT' } as const
const hup = { kind: 'signal', name: 'SIGHUP' } as const

t.test('the first SIGTERM or SIGINT drains, and the drain exits 0', async (t) => {
  for (const signal of [term, int]) {
    const { rules: r } = rules()
    t.same(r.hear(signal), { do: 'drain', signal: signal.name, failure: null })
    t.equal(r.exitCode(), 0)
  }
})

t.test('the same signal again within a second is a relay: ignored, the drain goes on', async (t) => {
  const { rules: r, at } = rules()
  r.hear(term)
  at(0)
  t.same(r.hear(term), { do: 'ignore' }, 'at once (npm or tsx passing it on)')
  at(RELAYED_WITHIN_MS - 1)
  t.same(r.hear(term), { do: 'ignore' }, 'just within the second')
  t.equal(r.exitCode(), 0, 'the drain still exits 0')
})

t.test('a second stop signal a second or more after the first quits at once', async (t) => {
  const { rules: r, at } = rules()
  r.hear(int)
  at(RELAYED_WITHIN_MS)
  t.same(r.hear(int), { do: 'quit', line: 'second SIGINT, exiting' })
  const later = rules()
  later.rules.hear(term)
  later.at(5_000)
  t.same(later.rules.hear(term), { do: 'quit', line: 'second SIGTERM, exiting' })
})

t.test('the other stop signal within the second is the same request; later it quits', async (t) => {
  // A Ctrl-C (SIGINT) and a group's SIGTERM at once ask for one drain, not for an end unflushed.
  const { rules: r, at } = rules()
  r.hear(int)
  at(10)
  t.same(r.hear(term), { do: 'ignore' })
  at(RELAYED_WITHIN_MS + 10)
  t.same(r.hear(term), { do: 'quit', line: 'second SIGTERM, exiting' })
})

t.test('a hangup drains; one during a drain changes nothing', async (t) => {
  const { rules: r, at } = rules()
  t.same(r.hear(hup), { do: 'drain', signal: 'SIGHUP', failure: null })
  at(5_000)
  t.same(r.hear(hup), { do: 'ignore' })
  t.same(r.hear(term), { do: 'ignore' }, 'a SIGTERM after a hangup counts as the first')
  at(5_500)
  t.same(r.hear(term), { do: 'ignore' }, 'its copy within the second')
  at(6_000)
  t.same(r.hear(term), { do: 'quit', line: 'second SIGTERM, exiting' }, 'a second one later')
  const during = rules()
  during.rules.hear(term)
  during.at(5_000)
  t.same(during.rules.hear(hup), { do: 'ignore' }, 'a hangup during a SIGTERM drain')
})

t.test('an unhandled rejection drains and exits 1; another is noted, not a second drain', async (t) => {
  const { rules: r } = rules()
  const first = new Error('planted 1')
  t.same(r.hear({ kind: 'error', error: first, fatal: false }), {
    do: 'drain',
    signal: undefined,
    failure: { error: first },
  })
  const second = new Error('planted 2')
  t.same(r.hear({ kind: 'error', error: second, fatal: false }), { do: 'note', error: second })
  t.equal(r.exitCode(), 1)
  const afterSignal = rules()
  afterSignal.rules.hear(term)
  afterSignal.rules.hear({ kind: 'error', error: first, fatal: false })
  t.equal(afterSignal.rules.exitCode(), 1, 'a rejection during a signal drain makes its exit 1')
})

t.test('an uncaught exception drains and exits 1; a second one quits at once', async (t) => {
  const { rules: r } = rules()
  const first = new Error('thrown')
  t.same(r.hear({ kind: 'error', error: first, fatal: true }), {
    do: 'drain',
    signal: undefined,
    failure: { error: first },
  })
  t.same(r.hear({ kind: 'error', error: first, fatal: true }), {
    do: 'quit',
    line: 'second error, exiting',
    error: first,
  })
})

t.test('SIGQUIT or SIGUSR2 drains; once a drain runs, they quit at once', async (t) => {
  const { rules: r } = rules()
  t.same(r.hear({ kind: 'signal', name: 'SIGUSR2' }), { do: 'drain', signal: 'SIGUSR2', failure: null })
  t.same(r.hear({ kind: 'signal', name: 'SIGQUIT' }), { do: 'quit', line: 'second SIGQUIT, exiting' })
})
