// The limit simulator (docs/api.md, The limit simulator): whom a limit would have refused over a
// range of the request log, replayed through the limiter itself (limits/simulation.ts).
import { ApiError, validationFailed } from '../errors.js'
import { periodUseBetween } from '../limits/store.js'
import { limitsOf } from '../limits/subjects.js'
import { ReplayThread } from '../limits/replay-thread.js'
import { LimitReplay, useBeforeOf } from '../limits/simulation.js'
import { dayOf } from '../request-log/partitions.js'
import { forwardedUnitsBetween, replayInOrder, replayRecordBound } from '../request-log/replay-records.js'
import { Simulation, SimulationBody } from '../schemas/limit-simulations.js'
import { bodyLimits } from './body-limits.js'
import { type ManagementContext, managementOperation, operation, ownSubAccount, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'

/** The most records one simulation reads (docs/api.md): a longer range is refused, naming the bound. */
export const SIMULATION_MAX_RECORDS = 10_000_000

const tooManySubAccounts = (most: number) =>
  validationFailed([
    {
      path: '/body/from',
      message: `the range holds requests of more than ${most} sub-accounts, the most a simulation replays: name a sub_account_id, or shorten the range`,
    },
  ])

/** No limit: every request passes (a simulation of `limits` that set none). */
const NO_LIMITS = { rate: null, monthlyQuota: null }

/** A simulation whose answer nobody waits for any more stops reading with this. */
const unwanted = () => new ApiError('store_unavailable', 'the simulation stopped: its answer is no longer wanted')

/** An RFC 3339 instant of the body as a Date; a 400 naming the field when it is not one. */
function instant(value: string, field: 'from' | 'to'): Date {
  const date = new Date(value)
  if (Number.isNaN(date.getTime()))
    throw validationFailed([{ path: `/body/${field}`, message: 'must be an RFC 3339 date-time' }])
  return date
}

export const LIMIT_SIMULATION_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/limits/simulations',
    schema: { ...operation('simulateLimits'), body: SimulationBody, response: { 200: Simulation } },
    // Seconds of paced reads, each statement under the usual bound: its own store deadline (hooks.ts).
    // Its place is the replica's one simulation place (log-reads.ts), not the heavy reads' gate.
    config: { scope: 'sub_accounts:read', storeDeadline: 'simulationMs', heavyRead: 'own place' },
    async handler(request, reply, { sql, reads, requestLog, usageExport }) {
      const body = request.body
      const accountId = parentOf(request).id
      const from = instant(body.from, 'from')
      const to = instant(body.to, 'to')
      if (to <= from) throw validationFailed([{ path: '/body/to', message: `must be after from (${body.from})` }])
      const nowMs = Date.now()
      if (to.getTime() > nowMs + 60_000)
        throw validationFailed([
          { path: '/body/to', message: 'must not be in the future: only past requests are replayed' },
        ])
      if (requestLog === null)
        throw validationFailed([
          {
            path: '/body/from',
            message: 'the request log is off (REQUEST_LOG_RETENTION_DAYS=0): there is nothing to replay',
          },
        ])
      const firstDay = dayOf(nowMs) - requestLog.retentionDays
      if (dayOf(from.getTime()) < firstDay)
        throw validationFailed([
          {
            path: '/body/from',
            message: `is before what the request log holds (${requestLog.retentionDays} days: from ${new Date(firstDay * 86_400_000).toISOString()})`,
          },
        ])
      const limits = limitsOf(bodyLimits(body.limits))
      const tenantId =
        body.sub_account_id === undefined ? null : (await ownSubAccount(sql, request, body.sub_account_id)).id
      const range = { accountId, tenantId, from, to }
      // Counted among the parent's reads of its log, bounded as they are, and one simulation at a
      // time on this replica, parents in turn; every read of it in that place, the month's use
      // before `from` too (a month of the parent's usage); replayed as it is read.
      const data = await requestLog.reads.simulate(accountId, request.deadline!.stop.signal, async () => {
        // The month's use before `from`: its whole usage periods, then the log's records of the period `from` is in.
        const monthStart = new Date(Date.UTC(from.getUTCFullYear(), from.getUTCMonth(), 1))
        const periodMs = usageExport.periodSeconds * 1000
        const periodStart = new Date(Math.max(monthStart.getTime(), from.getTime() - (from.getTime() % periodMs)))
        const [periods, partial] = await Promise.all([
          periodUseBetween(reads, accountId, monthStart, periodStart),
          forwardedUnitsBetween(requestLog.sql, accountId, periodStart, from, requestLog.statementTimeoutMs),
        ])
        // Only the month of `from` had use before the range; a later month's starts in it.
        const uses = new Map(periods)
        for (const [key, units] of partial) uses.set(key, (uses.get(key) ?? 0) + units)
        const useBefore = { month: from.toISOString().slice(0, 7), uses }
        const bound = await replayRecordBound(requestLog.sql, range, requestLog.statementTimeoutMs)
        if (bound > SIMULATION_MAX_RECORDS)
          throw validationFailed([
            {
              path: '/body/from',
              message: `the range holds up to ${bound} records of the request log, over the ${SIMULATION_MAX_RECORDS} a simulation reads: shorten it, or name a sub_account_id`,
            },
          ])
        const replay =
          bound >= requestLog.replayThreadFromRecords
            ? new ReplayThread({ limits: limits ?? NO_LIMITS, useBefore })
            : new LimitReplay(limits ?? NO_LIMITS, useBeforeOf(useBefore))
        try {
          const reading = { statementTimeoutMs: requestLog.statementTimeoutMs, copy: requestLog.copies }
          let taken = 0
          await replayInOrder(requestLog.sql, range, reading, (row, i) => {
            // Answered already (the store deadline's 503) or its client gone: the read and the
            // thread end here, not after the rest of the range.
            if ((++taken & 4095) === 0 && (reply.sent || request.socket.destroyed)) throw unwanted()
            // Checked before the next take, so that no promise of the replay is left behind.
            if (replay.subAccounts > requestLog.simulationMaxSubAccounts)
              throw tooManySubAccounts(requestLog.simulationMaxSubAccounts)
            return replay.take(
              row.tenantIds[i]!,
              row.timesUs[i]! / 1000,
              (row.timesUs[i]! + row.durationsUs[i]!) / 1000,
              row.costs[i]!,
              row.units?.[i] ?? null,
            )
          })
          // The requests still held are replayed here, within the read.
          return await replay.close()
        } finally {
          if (replay instanceof ReplayThread) await replay.stop()
        }
      })
      data.sort((a, b) => b.would_refuse - a.would_refuse || (a.sub_account_id < b.sub_account_id ? -1 : 1))
      const totals = { requests: 0, would_refuse: 0 }
      for (const entry of data) {
        totals.requests += entry.requests
        totals.would_refuse += entry.would_refuse
      }
      return { data, totals }
    },
  }),
]
