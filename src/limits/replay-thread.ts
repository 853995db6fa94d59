// A large limit simulation's replay on a thread of its own (docs/api.md, The limit simulator):
// the read's thread decodes the log's rows and merges them in time order while this one replays
// the records before them through the same LimitReplay, so the two halves of the work run on two
// cores. Records cross as numbers in transferred buffers; ids and meter names as indices, each
// text sent once.
import { extname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import type { Limits } from './types.js'
import type { MonthUseBefore, RequestReplay, SimulatedTenant } from './simulation.js'

/**
 * From this many records (a range's bound), a simulation replays on a thread of its own: below it,
 * the thread's start costs more than it saves.
 */
export const SIMULATION_THREAD_FROM_RECORDS = 200_000

/** Records a batch: a start, an end, a cost, a sub-account and a count of units (8 B each). */
export const BATCH_RECORDS = 16_384
const RECORD_FIELDS = 5
/** Batches sent and not yet replayed: the read waits beyond these, so memory stays bounded. */
const IN_FLIGHT_AT_MOST = 4

/** What the thread is started with. */
export interface ReplayThreadData {
  limits: Limits
  useBefore: MonthUseBefore
}

/** A batch of records, as the thread replays them (`records` and `units` are transferred). */
export interface ReplayBatch {
  type: 'batch'
  /** Sub-accounts and meters first named in this batch, taking the next indices. */
  newTenants: string[]
  newMeters: string[]
  count: number
  /** Per record: sub-account index, start (ms), end (ms), cost, how many units follow in `units`. */
  records: Float64Array
  /** Per unit reported: meter index, then the value. */
  units: Float64Array
}

/** What the thread answers: a batch replayed, the result at the close, or why it failed. */
export type ReplayAnswer =
  | { type: 'replayed' }
  | { type: 'closed'; tenants: SimulatedTenant[] }
  | { type: 'failed'; message: string }

/** The worker's file beside this one: .ts when run from the sources (tsx), .js when built. */
const WORKER_FILE = new URL(`./replay-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url)

/**
 * LimitReplay's `take` and `close`, with the replay on a worker thread. `stop` ends the thread
 * whatever state it is in; the caller calls it once done, failed or not.
 */
export class ReplayThread implements RequestReplay {
  private readonly worker: Worker
  private readonly tenantIndices = new Map<string, number>()
  private readonly meterIndices = new Map<string, number>()
  private newTenants: string[] = []
  private newMeters: string[] = []
  private records = new Float64Array(BATCH_RECORDS * RECORD_FIELDS)
  private units = new Float64Array(BATCH_RECORDS * 2)
  private count = 0
  private unitsAt = 0
  private inFlight = 0
  private failure: Error | null = null
  private result: SimulatedTenant[] | null = null
  /** Wakes whoever waits for the thread (the read when too far ahead, or the close) at each answer. */
  private wake: (() => void) | null = null

  get subAccounts(): number {
    return this.tenantIndices.size
  }

  constructor(data: ReplayThreadData) {
    this.worker = new Worker(WORKER_FILE, { workerData: data })
    this.worker.on('message', (answer: ReplayAnswer) => {
      if (answer.type === 'failed') return this.fail(new Error(`limit simulation: ${answer.message}`))
      if (answer.type === 'replayed') this.inFlight--
      else this.result = answer.tenants
      this.wakeUp()
    })
    this.worker.on('error', (error: Error) => this.fail(error))
    this.worker.on('messageerror', (error: Error) => this.fail(error))
    this.worker.on('exit', (code) => this.fail(new Error(`limit simulation: its thread stopped (exit ${code})`)))
  }

  take(
    tenantId: string,
    startMs: number,
    endMs: number,
    cost: number,
    units: Readonly<Record<string, number>> | null,
  ): Promise<void> | undefined {
    if (this.failure !== null) throw this.failure
    let tenant = this.tenantIndices.get(tenantId)
    if (tenant === undefined) {
      tenant = this.tenantIndices.size
      this.tenantIndices.set(tenantId, tenant)
      this.newTenants.push(tenantId)
    }
    const at = this.count * RECORD_FIELDS
    const records = this.records
    records[at] = tenant
    records[at + 1] = startMs
    records[at + 2] = endMs
    records[at + 3] = cost
    let reported = 0
    if (units !== null)
      for (const meter of Object.keys(units)) {
        this.unit(meter, units[meter]!)
        reported++
      }
    records[at + 4] = reported
    if (++this.count < BATCH_RECORDS) return undefined
    this.send()
    return this.inFlight < IN_FLIGHT_AT_MOST ? undefined : this.until(() => this.inFlight < IN_FLIGHT_AT_MOST)
  }

  async close(): Promise<SimulatedTenant[]> {
    if (this.failure !== null) throw this.failure
    if (this.count > 0) this.send()
    this.worker.postMessage({ type: 'close' })
    await this.until(() => this.result !== null)
    return this.result!
  }

  /** Ends the thread; a replay still under way is dropped. */
  async stop(): Promise<void> {
    this.worker.removeAllListeners('exit')
    // Wakes a take or a close still waiting, which then rejects.
    this.fail(new Error('limit simulation: stopped'))
    await this.worker.terminate()
  }

  private unit(meter: string, value: number): void {
    let index = this.meterIndices.get(meter)
    if (index === undefined) {
      index = this.meterIndices.size
      this.meterIndices.set(meter, index)
      this.newMeters.push(meter)
    }
    if (this.unitsAt + 2 > this.units.length) {
      const grown = new Float64Array(this.units.length * 2)
      grown.set(this.units)
      this.units = grown
    }
    this.units[this.unitsAt++] = index
    this.units[this.unitsAt++] = value
  }

  private send(): void {
    const batch: ReplayBatch = {
      type: 'batch',
      newTenants: this.newTenants,
      newMeters: this.newMeters,
      count: this.count,
      records: this.records,
      units: this.units,
    }
    this.worker.postMessage(batch, [this.records.buffer, this.units.buffer])
    this.inFlight++
    this.newTenants = []
    this.newMeters = []
    this.records = new Float64Array(BATCH_RECORDS * RECORD_FIELDS)
    this.units = new Float64Array(BATCH_RECORDS * 2)
    this.count = 0
    this.unitsAt = 0
  }

  /** Resolves once `done` holds after an answer of the thread's; rejects once the thread fails. */
  private async until(done: () => boolean): Promise<void> {
    while (!done()) {
      if (this.failure !== null) throw this.failure
      await new Promise<void>((resolve) => {
        this.wake = resolve
      })
    }
  }

  private wakeUp(): void {
    const wake = this.wake
    this.wake = null
    wake?.()
  }

  private fail(error: Error): void {
    this.failure ??= error
    this.wakeUp()
  }
}
