// A sub-account's credit of 10^12 tokens on a slow process, as bench:credit-instructions met it
// under valgrind (a 402 credits_exhausted after 462,000 units): a Limiter on Redis 127.0.0.1:6379
// through a relay that delays every chunk DELAY_MS each way, the event loop stalled STALL_MS every
// STALL_EVERY_MS (the lease in hand expires: its renewals are then sized by demand), and 8 clients
// admitted as the proxy's limit gate admits them, each answer charging 42 tokens after UPSTREAM_MS.
// Prints how many requests were admitted, refused by the credit (a 402 with units left: a bug),
// undecided (a 503 to retry) and waited for a lease, and Redis's count of the credit before and
// after the limiter closed. Postgres is not there (its use reads 0, with no meter lag): units the
// limiter admitted alone while its first call timed out are held by the copy of the month made
// from that read, as the gateway's meter would have written them, so Redis's count after close
// is that much below the units charged (nothing is lost when DELAY_MS=0).
//   npx tsx bench/credit-slow-redis.ts
//   LIMITER_SRC=/tmp/old/src npx tsx bench/credit-slow-redis.ts   (another checkout's limiter)
import { connect, createServer, type Socket } from 'node:net'
import { Redis } from '../src/cache/ioredis.js'
import type { Decision, LimitSubject } from '../src/limits/types.js'

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
const DELAY_MS = env('DELAY_MS', 80)
const RUN_S = env('RUN_S', 25)
const UPSTREAM_MS = env('UPSTREAM_MS', 20)
const STALL_MS = env('STALL_MS', 2_500)
const STALL_EVERY_MS = env('STALL_EVERY_MS', 8_000)
const source = process.env.LIMITER_SRC ?? '../src'
const { Limiter } = (await import(`${source}/limits/limiter.ts`)) as typeof import('../src/limits/limiter.js')

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
/** Holds the event loop for `ms`: a process under valgrind (or a long GC) does not run meanwhile. */
const stall = (ms: number) => {
  const until = Date.now() + ms
  while (Date.now() < until) {}
}

/** Relays every chunk from `from` to `to` DELAY_MS later, in order. */
function delayed(from: Socket, to: Socket): void {
  from.on('data', (chunk) => setTimeout(() => to.write(chunk), DELAY_MS))
  from.on('error', () => {})
  from.on('close', () => to.destroy())
}
const relay = createServer((client) => {
  const server = connect(6379, '127.0.0.1')
  delayed(client, server)
  delayed(server, client)
})
await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
const { port } = relay.address() as { port: number }
const redis = new Redis(`redis://127.0.0.1:${port}`, { maxRetriesPerRequest: 0 })
redis.on('error', () => {})
const prefix = `credit-slow:${process.pid}:`
// A call's deadline above the relay's round trip: only the renewals' timing is under test.
const limiter = new Limiter({
  redis,
  keyPrefix: prefix,
  loadMonthUse: async () => 0,
  timings: { callTimeoutMs: 4 * DELAY_MS + 100 },
})
const TERA = 1e12
const subjects: LimitSubject[] = [
  {
    tenantId: 'sub-1',
    level: 'sub_account',
    limits: {
      rate: null,
      monthlyQuota: null,
      credits: [
        { meter: 'tokens', settled: 0, live: [{ units: TERA, left: TERA, expiresAt: null }], lowThresholdPercent: 10 },
      ],
    },
  },
]
const counts = { admitted: 0, refused: 0, undecided: 0, waited: 0 }
const stalls = setInterval(() => stall(STALL_MS), STALL_EVERY_MS)
const end = Date.now() + RUN_S * 1_000

/** One client: its next request as soon as the last is answered (a refusal after a pause). */
async function client(): Promise<void> {
  while (Date.now() < end) {
    let decision: Decision
    if (limiter.isWarm(subjects, 42)) decision = limiter.admit(subjects, 42)
    else {
      counts.waited++
      decision = await limiter.admitWhenWarm(subjects, undefined, 42)
    }
    if (decision.allowed) {
      counts.admitted++
      await sleep(UPSTREAM_MS)
      limiter.charge(subjects, new Map([['tokens', 42]]))
    } else {
      counts[decision.undecided ? 'undecided' : 'refused']++
      await sleep(50)
    }
  }
}
await Promise.all(Array.from({ length: 8 }, client))
clearInterval(stalls)
const admin = new Redis('redis://127.0.0.1:6379')
const keys = await admin.keys(`${prefix}*`)
let used = ''
for (const key of keys) if ((await admin.type(key)) === 'hash') used = (await admin.hget(key, 'used')) ?? ''
// Given back and paid: what is left counted is what was used, and the limiter's own debts.
await sleep(Number(process.env.SETTLE_MS ?? 1_000))
await limiter.close()
let closedUsed = ''
for (const key of keys) if ((await admin.type(key)) === 'hash') closedUsed = (await admin.hget(key, 'used')) ?? ''
if (keys.length > 0) await admin.del(...keys)
admin.disconnect()
redis.disconnect()
relay.close()
console.log(
  JSON.stringify({
    limiter: source,
    delayMs: DELAY_MS,
    ...counts,
    charged: counts.admitted * 42,
    redisUsed: used,
    afterClose: closedUsed,
  }),
)
