// What buildApp (app.ts) hands each registration, one named function a feature: each plugin's
// options from AppDeps and the decorations registered before it (the Fastify options and the
// server's settings are app-server.ts's; the surfaces' are app-surface-options.ts's, the proxy's
// app-proxy-options.ts's). Apart from app.ts so that buildApp reads as the order of registration.
import type { FastifyInstance } from 'fastify'
import type { AppDeps } from './app-deps.js'
import { logging } from './app-server.js'
import { AccessTokens } from './auth/access-tokens.js'
import { TRACE_FLUSH_BOUND_MS, type TracesOptions } from './traces/plugin.js'

export const metricsOptions = (deps: AppDeps) => ({ store: deps.store, metrics: deps.metrics })

/** Tracing's settings (null: off), and how long the stop waits for the last spans. */
export const tracesOptions = (deps: AppDeps): TracesOptions => ({
  settings: deps.config.traces,
  flushBoundMs: deps.tuning?.traceFlushBoundMs ?? TRACE_FLUSH_BOUND_MS,
})

/** The Redis the tenancy cache and the limiter share, and its key prefix. */
const redisOf = (deps: AppDeps) => ({
  // The lookups' own connections: a flood of heavy reads never holds up a key's first request.
  sql: deps.store.lookupSql ?? deps.store.sql,
  redis: deps.config.redis,
  keyPrefix: deps.redisKeyPrefix ?? deps.config.redisKeyPrefix,
})

export const cacheOptions = (deps: AppDeps) => ({ ...redisOf(deps), timings: deps.tuning?.cacheTimings })

export const limitsOptions = (deps: AppDeps) => ({
  ...redisOf(deps),
  timings: deps.tuning?.limitTimings,
  warmWaitMs: deps.tuning?.limitWarmWaitMs,
})

export function signingKeysOptions(deps: AppDeps, encryptionKey: Buffer) {
  return {
    sql: deps.store.sql,
    encryptionKey,
    rotationDays: deps.config.signingKeyRotationDays,
    reloadIntervalMs: deps.tuning?.signingKeys?.reloadIntervalMs,
  }
}

export function requestLogOptions(deps: AppDeps) {
  const logStore = deps.requestLogStore ?? deps.store
  return {
    sql: logStore.sql,
    // A real Postgres takes the rows as a binary COPY, on a connection of the writer's own.
    ...(logStore.openOwnConnection === undefined ? {} : { openCopyConnection: logStore.openOwnConnection }),
    retentionDays: deps.config.requestLogRetentionDays,
    ...deps.tuning?.requestLog,
  }
}

export const usageMeterOptions = (deps: AppDeps) => ({
  sql: deps.store.sql,
  // A real Postgres takes the meter's writes on a connection of its own, ended when one hangs.
  openConnection: deps.store.openOwnConnection,
  flushIntervalMs: deps.tuning?.usageFlushIntervalMs,
  periodSeconds: deps.config.usagePeriodSeconds,
  closeGraceSeconds: deps.config.usageCloseGraceSeconds,
  closeIntervalMs: deps.tuning?.usagePeriods?.closeIntervalMs,
  liveReplicaSeconds: deps.tuning?.usagePeriods?.liveReplicaSeconds,
  clock: deps.tuning?.usagePeriods?.clock,
  push:
    deps.config.usageExport === null
      ? null
      : {
          ...deps.config.usageExport,
          source: deps.config.issuerUrl,
          retrySchedule: deps.config.webhooksRetrySchedule,
          intervalMs: deps.tuning?.usagePeriods?.exportIntervalMs,
          leaseSeconds: deps.tuning?.usagePeriods?.exportLeaseSeconds,
        },
})

export const alertsOptions = (deps: AppDeps) => ({ sql: deps.store.sql, ...deps.tuning?.alerts })

/** Each request's line (with a logger), metrics, usage and request-log record. */
export const accountingOptions = (deps: AppDeps) => ({ logRequests: logging(deps) })

/** /healthz and /readyz: the store, the cache's Redis and the drain. */
export const healthOptions = (app: FastifyInstance, deps: AppDeps) => ({
  sql: deps.store.sql,
  probeSql: deps.store.lookupSql ?? deps.store.sql,
  cache: app.tenancyCache,
  readiness: app.readiness,
})

/** The JWKS and the authorization server's metadata: the keyring's public keys. */
export const credentialOptions = (app: FastifyInstance) => ({ keyring: app.keyring })

export function eventRetentionOptions(deps: AppDeps) {
  return { sql: deps.store.sql, retentionDays: deps.config.eventsRetentionDays, ...deps.tuning?.eventRetention }
}

export function webhookDeliveryOptions(deps: AppDeps, encryptionKey: Buffer) {
  const tuning = deps.tuning?.webhookDelivery
  return {
    sql: deps.store.sql,
    encryptionKey,
    schedule: deps.config.webhooksRetrySchedule,
    listen: !deps.store.embedded,
    ...tuning,
    delivery: { allowInsecure: deps.config.webhooksAllowInsecure, ...tuning?.delivery },
  }
}

/** The verifier of access tokens the tenancy check uses (app.accessTokens). */
export function accessTokens(app: FastifyInstance, deps: AppDeps): AccessTokens {
  return new AccessTokens(app.keyring, {
    issuer: deps.config.issuerUrl,
    verifications: app.metrics.credentials.tokenVerifications,
  })
}
