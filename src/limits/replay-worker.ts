// The thread a large limit simulation replays on (replay-thread.ts): LimitReplay over the batches
// the read's thread sends, in order, answering each once replayed so that the read may send more.
import { parentPort, workerData } from 'node:worker_threads'
import type { ReplayAnswer, ReplayBatch, ReplayThreadData } from './replay-thread.js'
import { LimitReplay, useBeforeOf } from './simulation.js'

const port = parentPort!
const { limits, useBefore } = workerData as ReplayThreadData
const replay = new LimitReplay(limits, useBeforeOf(useBefore))
const tenants: string[] = []
const meters: string[] = []

async function replayBatch({ newTenants, newMeters, count, records, units }: ReplayBatch): Promise<void> {
  for (const tenant of newTenants) tenants.push(tenant)
  for (const meter of newMeters) meters.push(meter)
  let unitsAt = 0
  for (let i = 0, at = 0; i < count; i++, at += 5) {
    let reported: Record<string, number> | null = null
    for (let n = records[at + 4]!; n > 0; n--, unitsAt += 2) {
      // A literal, not Object.create(null), which V8 keeps as a slow dictionary: meter names start
      // with a letter (METER_NAME), so none is `__proto__`.
      reported ??= {}
      reported[meters[units[unitsAt]!]!] = units[unitsAt + 1]!
    }
    const waiting = replay.take(tenants[records[at]!]!, records[at + 1]!, records[at + 2]!, records[at + 3]!, reported)
    if (waiting !== undefined) await waiting
  }
}

const answer = (message: ReplayAnswer) => port.postMessage(message)
// Batches are replayed one after the other, in the order sent; after a failure nothing more is.
let replayed: Promise<void> = Promise.resolve()
port.on('message', (message: ReplayBatch | { type: 'close' }) => {
  replayed = replayed.then(async () => {
    if (message.type === 'batch') {
      await replayBatch(message)
      answer({ type: 'replayed' })
    } else answer({ type: 'closed', tenants: await replay.close() })
  })
  replayed.catch((error: unknown) => answer({ type: 'failed', message: String((error as Error)?.message ?? error) }))
})
