// The signing keys' reload loop (src/signing-keys/sync.ts) at a stop: a reload under way that waits
// on a Postgres that does not answer (postgres.js tries a refused connection again after pauses of
// up to 20 s) does not hold the gateway's close; the pool's end cuts it.
import t from 'tap'
import { Keyring } from '../../src/signing-keys/keyring.js'
import type { SigningKeyStore } from '../../src/signing-keys/store.js'
import { SigningKeySync } from '../../src/signing-keys/sync.js'

const quiet = { warn() {}, error() {}, info() {} } as never

t.test('a stop does not wait for a reload that never ends', async (t) => {
  let asked = 0
  let answer: ((keys: []) => void) | null = null
  // A store whose reads never answer, until the test lets the last one go.
  // A store whose first read does not answer until the test lets it go; the reads after it find
  // no key, as a new database has none, and make none.
  const store = {
    published: () => {
      if (asked++ > 0) return Promise.resolve([])
      return new Promise<[]>((resolve) => {
        answer = resolve
      })
    },
    ensureSigningKey: async () => null,
    unseal: async () => [],
    clock: () => Date.now(),
  } as unknown as SigningKeyStore
  const sync = new SigningKeySync({
    store,
    keyring: new Keyring(),
    rotationPeriodMs: 86_400_000,
    log: quiet,
    announce: async () => {},
  })
  const started = sync.start()
  // The stop waits 2 s at most; 10 s is far past it on any machine, and far short of the 20 s.
  let timer: NodeJS.Timeout | undefined
  const stopped = await Promise.race([
    sync.stop().then(() => 'stopped'),
    new Promise<string>((resolve) => {
      timer = setTimeout(resolve, 10_000, 'still waiting after 10 s')
    }),
  ])
  clearTimeout(timer)
  t.equal(stopped, 'stopped', 'the stop returned while the read still waits')
  t.equal(asked, 1, 'one read was under way')
  answer!([])
  await started
  t.equal(asked, 2, 'once let go, the reload ended (and read once more: no key was there)')
})
