// Where leases come from: the two Redis scripts (scripts.ts) behind an interface, so that the
// limiter's accounting is tested against a store in memory and the scripts against Redis.
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import type { RedisClient } from '../cache/redis-topology.js'
import { limitKeys } from './keys.js'
import { QUOTA_LEASE, RATE_LEASE } from './scripts.js'

export interface LeaseCall {
  /** Tokens this replica still holds and goes on spending: registered under the new expiry. */
  keep: number
  /** Tokens given back: unused, or refunded by the gateway. */
  returned: number
  wanted: number
  /** Units admitted while Redis was unusable, beyond the lease held then: taken now. */
  extra: number
  /** A metered limit's units charged beyond the lease (leased-limit.ts, charge): taken now, below zero too. */
  debt?: number
}

export interface RateCall extends LeaseCall {
  key: string
  requests: number
  perMs: number
  /** The answer's wait says when this many tokens will be in the bucket. */
  batch: number
  /** The bucket's epoch this replica last saw ('' if none): `extra` is charged to another one only. */
  epoch: string
  /** The bucket as this replica last saw it, refilled to now (-1 if never): a rebuilt one starts so. */
  seen: number
}

export interface RateAnswer {
  granted: number
  /** The shared bucket after the grant (may be fractional or negative). */
  tokens: number
  waitMs: number
  /** Redis was found empty less than a grace ago: nothing is granted yet (scripts.ts). */
  inGrace: boolean
  /** Names this copy of the bucket: a new one after Redis forgot it. */
  epoch: string
}

export interface QuotaCall extends LeaseCall {
  key: string
  requests: number
  /** The epoch of the key this replica's lease was granted in ('' if none). */
  epoch: string
  /** The month's use read from Postgres, or -1 when not read yet. */
  init: number
  expireAt: number
  /** Names the report among this replica's: sent again after a timeout, it is applied once (scripts.ts). */
  report: string
  /**
   * Units this replica admitted in the month that Postgres may not hold yet: counted, beside
   * `keep`, by a copy of the month other than `epoch` (rebuilt since), instead of `extra`.
   */
  unwritten?: number
  /** Instead of `unwritten` when this call's `init` makes the copy: what was not written when it was read. */
  unwrittenSinceRead?: number
}

export type QuotaAnswer =
  | { rebuild: true }
  | { rebuild: false; granted: number; used: number; waitMs: number; epoch: string; inGrace: boolean }

export interface LeaseStore {
  rate(call: RateCall): Promise<RateAnswer>
  quota(call: QuotaCall): Promise<QuotaAnswer>
  /** A lease's life: unrenewed, it is spent no later than this after its call was sent. */
  readonly ttlMs: number
}

export interface LeaseTimings {
  ttlMs: number
  /** Nothing is granted for this long after Redis is found empty (scripts.ts). */
  graceMs: number
  /** A call not answered within this is a failure (its late grant stays stranded until expiry). */
  callTimeoutMs: number
}

/**
 * No grace: a Redis that lost its keys grants at once
 * (docs/decisions/0111-a-redis-found-empty-grants-at-once.md). A rebuilt bucket starts as the
 * replicas last saw it, charged for what they admitted on their own meanwhile, so across a flush
 * the bound may be exceeded by at most one lease per replica (docs/internals.md, limits).
 */
export const DEFAULT_LEASE_TIMINGS: LeaseTimings = { ttlMs: 2_000, graceMs: 0, callTimeoutMs: 250 }

/**
 * How long Redis remembers the last report a replica made of a month (scripts.ts, QUOTA_LEASE). A
 * report is sent again only while the last copy sent has no answer; the name must outlive every
 * copy still on its way: an hour covers a Redis that runs one copy, then stops answering again.
 */
export const REPORT_KEPT_MS = 3_600_000
interface LeaseCommands {
  tgwRateLease(...args: (string | number)[]): Promise<[number, string, number, number, string]>
  tgwQuotaLease(...args: (string | number)[]): Promise<[number, string, number, string, number]>
}

/** Connecting, not down: a call waits for the connection, within its own deadline. */
const CONNECTING = new Set(['wait', 'connecting', 'connect'])

/**
 * Sends `send()` once `redis` is ready, and fails it if no answer came within `ms` of the start.
 * The failure waits one turn of the event loop past its timer (timers run before I/O is read): an
 * answer that arrived while this process was stalled (a long collection, a starved CPU) is read
 * first, so that the stall is not taken for a slow Redis and the replica does not degrade for it.
 */
async function within<T>(redis: RedisClient, send: () => Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  let turn: NodeJS.Immediate | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      turn = setImmediate(() => reject(new Error(`lease call unanswered after ${ms} ms`)))
    }, ms)
  })
  try {
    if (CONNECTING.has(redis.status)) await Promise.race([once(redis, 'ready'), late])
    return await Promise.race([send(), late])
  } finally {
    clearTimeout(timer)
    clearImmediate(turn)
  }
}

/** The scripts on `redis`, loaded once each (EVALSHA, EVAL again only when Redis lost them). */
export class RedisLeaseStore implements LeaseStore {
  readonly ttlMs: number
  private readonly redis: RedisClient
  private readonly commands: LeaseCommands
  private readonly replica = randomBytes(8).toString('hex')
  private readonly keyPrefix: string

  private readonly timings: LeaseTimings
  constructor(redis: RedisClient, keyPrefix: string, timings: LeaseTimings = DEFAULT_LEASE_TIMINGS) {
    this.timings = timings
    this.ttlMs = timings.ttlMs
    this.redis = redis
    this.keyPrefix = keyPrefix
    if (!('tgwRateLease' in redis)) {
      redis.defineCommand('tgwRateLease', { numberOfKeys: 2, lua: RATE_LEASE })
      redis.defineCommand('tgwQuotaLease', { numberOfKeys: 3, lua: QUOTA_LEASE })
    }
    this.commands = redis as unknown as LeaseCommands
  }

  async rate(call: RateCall): Promise<RateAnswer> {
    const { ttlMs, graceMs, callTimeoutMs } = this.timings
    const reply = await within(
      this.redis,
      () =>
        this.commands.tgwRateLease(
          call.key,
          limitKeys.incarnationOf(this.keyPrefix, call.key),
          this.replica,
          call.requests,
          call.perMs,
          call.keep,
          call.returned,
          call.wanted,
          call.extra,
          ttlMs,
          call.batch,
          graceMs,
          call.epoch,
          randomBytes(6).toString('hex'),
          call.seen,
          call.debt ?? 0,
        ),
      callTimeoutMs,
    )
    return {
      granted: Number(reply[0]),
      tokens: Number(reply[1]),
      waitMs: Number(reply[2]),
      inGrace: Number(reply[3]) === 1,
      epoch: String(reply[4]),
    }
  }

  async quota(call: QuotaCall): Promise<QuotaAnswer> {
    const { graceMs, callTimeoutMs } = this.timings
    const reply = await within(
      this.redis,
      () =>
        this.commands.tgwQuotaLease(
          call.key,
          limitKeys.incarnationOf(this.keyPrefix, call.key),
          limitKeys.reportOf(call.key, this.replica),
          call.requests,
          call.epoch,
          call.keep,
          call.returned,
          call.wanted,
          call.extra,
          call.init,
          call.expireAt,
          randomBytes(6).toString('hex'),
          graceMs,
          call.report,
          REPORT_KEPT_MS,
          call.unwritten ?? 0,
          call.unwrittenSinceRead ?? call.unwritten ?? 0,
        ),
      callTimeoutMs,
    )
    if (Number(reply[0]) < 0) return { rebuild: true }
    return {
      rebuild: false,
      granted: Number(reply[0]),
      used: Number(reply[1]),
      waitMs: Number(reply[2]),
      epoch: String(reply[3]),
      inGrace: Number(reply[4]) === 1,
    }
  }
}
