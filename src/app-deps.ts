// What buildApp (app.ts) is given: the configuration, the store and what a caller may hand it
// instead of the defaults (AppDeps), and the timings, clocks and stand-ins tests change
// (AppTuning). Apart from app.ts so that the composition root reads as the order of registration.
import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify'
import type { AlertTimings } from './alerts/plugin.js'
import type { CacheTimings } from './cache/index.js'
import type { Config } from './config.js'
import type { LeaseTimings } from './limits/lease-store.js'
import type { Metrics } from './ops/metrics.js'
import type { ProxyRoute } from './proxy/route.js'
import type { RequestLogPluginOptions } from './request-log/plugin.js'
import type { Keyring } from './signing-keys/keyring.js'
import type { Store } from './store/db.js'
import type { StoreDeadlines } from './store/deadlines.js'
import type { WebhookDeliveryPluginOptions } from './webhooks/delivery-plugin.js'
import type { LookupAll } from './webhooks/url-policy.js'

export interface AppDeps {
  config: Config
  store: Store
  /** The route table; by default the one in `config`, validated by buildApp. */
  routes?: readonly ProxyRoute[]
  /**
   * The signing keys of access tokens and identity assertions, as the caller holds them (a test's
   * own). Default: the keys in the store, loaded, kept in step and rotated by the app
   * (signing-keys/plugin.ts), which then needs `config.encryptionKey` (main.ts resolves it).
   */
  keyring?: Keyring
  /** Where the request log is kept (main.ts opens REQUEST_LOG_DATABASE_URL); default the store's. */
  requestLogStore?: Store
  /** Overrides REDIS_KEY_PREFIX (tests use one prefix per file). */
  redisKeyPrefix?: string
  metrics?: Metrics
  /** A pino logger configuration, or an instance (tests capture the stream); false for none. */
  logger?: FastifyServerOptions['logger'] | FastifyBaseLogger | false
  tuning?: AppTuning
}

/**
 * Timings, clocks and stand-ins that tests shorten, move or replace; the process uses the
 * defaults. Passed whole (test/helpers/gateway.ts hands its options over as they are), so a new
 * one is a field here and its use in buildApp (app.ts).
 */
export interface AppTuning {
  /** The stored signing keys' clock and reload interval (default 30 s). */
  signingKeys?: { clock?: () => number; reloadIntervalMs?: number }
  cacheTimings?: Partial<CacheTimings>
  /** The limiter's lease timings. */
  limitTimings?: Partial<LeaseTimings>
  /** How long a request waits at most for its limits' first answers (default 300 ms, limits/limiter.ts). */
  limitWarmWaitMs?: number
  /** How often the usage meter writes to Postgres. */
  usageFlushIntervalMs?: number
  /** The usage meter's clock (which dates counts and flush marks), how often periods close and are pushed, the push's lease. */
  usagePeriods?: {
    clock?: () => number
    closeIntervalMs?: number
    /** How long a replica that stopped flushing is waited for before its periods close without it. */
    liveReplicaSeconds?: number
    exportIntervalMs?: number
    exportLeaseSeconds?: number
  }
  /** The request log's buffer, batches, write interval, retention sweep and clock. */
  requestLog?: Omit<RequestLogPluginOptions, 'sql' | 'retentionDays' | 'openCopyConnection'>
  /** The events' retention sweep: its batch size, interval and clock. */
  eventRetention?: { batchSize?: number; intervalMs?: number; firstSweepAfterMs?: number; clock?: () => number }
  /** The webhook worker's timings, clock and delivery options. */
  webhookDelivery?: Partial<Omit<WebhookDeliveryPluginOptions, 'sql' | 'encryptionKey' | 'schedule'>>
  /** The alerts' timings and clock: checks, the rate alerts' window, the sweep of expiring keys. */
  alerts?: AlertTimings
  /** How long the stop waits for the last spans to reach the collector (default TRACE_FLUSH_BOUND_MS, traces/plugin.ts). */
  traceFlushBoundMs?: number
  /** How long a request head may take to arrive (default HEADERS_TIMEOUT_MS, http/server-limits.ts). */
  headersTimeoutMs?: number
  /** How long a management body may take to arrive (default MANAGEMENT_BODY_TIMEOUT_MS). */
  managementBodyTimeoutMs?: number
  /** How long a streamed management body (a key import) may take (default STREAMED_BODY_TIMEOUT_MS). */
  managementStreamedBodyTimeoutMs?: number
  /** How long a key import's answer may wait for its client to read on (default 30 s, management/key-import-places.ts). */
  keyImportAnswerStallMs?: number
  /** The bytes a replica's key import spools hold together at most (default 120 MiB). */
  keyImportSpoolBytes?: number
  /**
   * How long requests wait on Postgres, and the lookup batchers' pace (default STORE_DEADLINES,
   * store/deadlines.ts). Tests lengthen the waits: on a loaded machine a query may queue past
   * 500 ms, and a test is not about that. The flood tests slow the pace, so that they outrun it.
   */
  storeDeadlines?: Partial<StoreDeadlines>
  /** From how many records a limit simulation replays on a thread of its own (default SIMULATION_THREAD_FROM_RECORDS). */
  simulationThreadFromRecords?: number
  /** The most sub-accounts a limit simulation replays (default SIMULATION_MAX_SUB_ACCOUNTS). */
  simulationMaxSubAccounts?: number
  /** The most sub-account meters one usage reconciliation answers (default RECONCILIATION_MAX_ROWS). */
  reconciliationMaxRows?: number
  /** How often expired idempotency keys are deleted (default 60 s). */
  idempotencySweepIntervalMs?: number
  /** The clock of a route's passive health, in ms (default Date.now): a test moves it past a target's back-off. */
  upstreamClock?: () => number
  /** Resolves webhook URLs' names at creation (default node:dns lookup). */
  webhookLookup?: LookupAll
}
