// The trace settings (docs/configuration.md, Traces): the OpenTelemetry specification's own
// variables, read as it says (its "SDK environment variables" and "OTLP exporter" pages), and the
// gateway's two. Stricter than the specification on one point: a value it would warn about and
// ignore is a start-up error naming the variable, since a gateway that silently traces nothing is
// worse than one that does not start.
import { ConfigError, type Env, parseUrl, read } from './config-readers.js'

/** OTEL_TRACES_SAMPLER's values (the specification's, less the vendors' `xray` and `jaeger_remote`). */
export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const
export type TraceSamplerName = (typeof TRACE_SAMPLERS)[number]

/** How the batch span processor holds and sends spans (OTEL_BSP_*). */
export interface BatchSettings {
  /** Milliseconds between two exports (OTEL_BSP_SCHEDULE_DELAY, default 5000). */
  readonly scheduledDelayMs: number
  /** Milliseconds an export may take (OTEL_BSP_EXPORT_TIMEOUT, default 30000). */
  readonly exportTimeoutMs: number
  /** Spans held at most; past it a span is dropped (OTEL_BSP_MAX_QUEUE_SIZE, default 2048). */
  readonly maxQueueSize: number
  /** Spans per export at most, ≤ maxQueueSize (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, default 512). */
  readonly maxExportBatchSize: number
}

/** Tracing's settings; the Config holds null for them when no OTLP endpoint is set (tracing off). */
export interface TraceSettings {
  /** Where spans are posted: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, or OTEL_EXPORTER_OTLP_ENDPOINT + `/v1/traces`. */
  readonly endpoint: string
  readonly protocol: 'http/protobuf' | 'http/json'
  /** Sent with every export (OTEL_EXPORTER_OTLP_HEADERS, then _TRACES_HEADERS): a collector's credentials. */
  readonly headers: Readonly<Record<string, string>>
  /** Milliseconds an export request may take (OTEL_EXPORTER_OTLP_TIMEOUT, default 10000). */
  readonly exportTimeoutMs: number
  readonly serviceName: string
  /** OTEL_RESOURCE_ATTRIBUTES, decoded. */
  readonly resourceAttributes: Readonly<Record<string, string>>
  readonly sampler: TraceSamplerName
  /** The ratio of the `traceidratio` samplers, 0 to 1 (OTEL_TRACES_SAMPLER_ARG, default 1). */
  readonly samplerRatio: number
  readonly batch: BatchSettings
  /** `continue` the client's W3C trace context, or `ignore` it: a new trace that links to it. */
  readonly clientContext: 'continue' | 'ignore'
}

/**
 * A `key=value,key=value` list, values percent-encoded (the specification's form for headers and
 * resource attributes), refused when malformed. Read here rather than with @opentelemetry/core's
 * reader, which skips a bad entry without a word, and so that a gateway that does not trace loads
 * none of the SDK.
 */
function parsePairs(env: Env, name: string): Record<string, string> {
  const raw = read(env, name)
  if (raw === undefined) return {}
  const pairs: Record<string, string> = {}
  for (const entry of raw.split(',')) {
    const at = entry.indexOf('=')
    const key = entry.slice(0, at).trim()
    // Never echo the value: headers carry a collector's credentials.
    if (at <= 0 || key === '')
      throw new ConfigError(name, 'must be a list of key=value pairs separated by commas (values percent-encoded)')
    try {
      pairs[decodeURIComponent(key)] = decodeURIComponent(entry.slice(at + 1).trim())
    } catch {
      throw new ConfigError(name, `has a value that is not valid percent-encoding (for ${key})`)
    }
  }
  return pairs
}

/** A whole number of milliseconds or spans from `min` to `max`. */
function parseWhole(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,9}$/.test(raw) || Number(raw) < min || Number(raw) > max)
    throw new ConfigError(name, `must be a whole number from ${min} to ${max}, got "${raw}"`)
  return Number(raw)
}

function parseEndpoint(env: Env): string | null {
  const traces = parseUrl(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', ['http:', 'https:'])
  if (traces !== undefined) return traces
  const base = parseUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT', ['http:', 'https:'])
  // The specification: the signal's path is appended to the base endpoint, never to the traces one.
  return base === undefined ? null : `${base.replace(/\/+$/, '')}/v1/traces`
}

function parseProtocol(env: Env): TraceSettings['protocol'] {
  const name =
    read(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') === undefined
      ? 'OTEL_EXPORTER_OTLP_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
  const raw = read(env, name) ?? 'http/protobuf'
  if (raw === 'http/protobuf' || raw === 'http/json') return raw
  throw new ConfigError(name, `must be http/protobuf or http/json (grpc is not supported), got "${raw}"`)
}

function parseSampler(env: Env): { sampler: TraceSamplerName; samplerRatio: number } {
  const raw = read(env, 'OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on'
  if (!(TRACE_SAMPLERS as readonly string[]).includes(raw))
    throw new ConfigError('OTEL_TRACES_SAMPLER', `must be one of ${TRACE_SAMPLERS.join(', ')}, got "${raw}"`)
  const sampler = raw as TraceSamplerName
  const arg = read(env, 'OTEL_TRACES_SAMPLER_ARG')
  if (arg === undefined || !sampler.endsWith('traceidratio')) return { sampler, samplerRatio: 1 }
  const ratio = /^(0|1|0?\.\d+|1\.0*|0\.\d*)$/.test(arg) ? Number(arg) : Number.NaN
  if (!(ratio >= 0 && ratio <= 1))
    throw new ConfigError(
      'OTEL_TRACES_SAMPLER_ARG',
      `must be a ratio from 0 to 1 (0.01: one trace in a hundred), got "${arg}"`,
    )
  return { sampler, samplerRatio: ratio }
}

function parseBatch(env: Env): BatchSettings {
  const maxQueueSize = parseWhole(env, 'OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1, 1_000_000)
  const maxExportBatchSize = parseWhole(
    env,
    'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    Math.min(512, maxQueueSize),
    1,
    1_000_000,
  )
  if (maxExportBatchSize > maxQueueSize)
    throw new ConfigError(
      'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
      `must be at most OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize}), got "${maxExportBatchSize}"`,
    )
  return {
    scheduledDelayMs: parseWhole(env, 'OTEL_BSP_SCHEDULE_DELAY', 5000, 1, 3_600_000),
    exportTimeoutMs: parseWhole(env, 'OTEL_BSP_EXPORT_TIMEOUT', 30_000, 1, 3_600_000),
    maxQueueSize,
    maxExportBatchSize,
  }
}

function parseClientContext(env: Env): TraceSettings['clientContext'] {
  const raw = read(env, 'TRACE_CLIENT_CONTEXT') ?? 'continue'
  if (raw === 'continue' || raw === 'ignore') return raw
  throw new ConfigError('TRACE_CLIENT_CONTEXT', `must be continue or ignore, got "${raw}"`)
}

/**
 * Tracing's settings, or null when neither OTLP endpoint is set (or OTEL_SDK_DISABLED=true).
 * Every variable is checked either way: a mistake found only once tracing is turned on would stop
 * that deploy instead of this one.
 */
export function parseTraceSettings(env: Env): TraceSettings | null {
  const disabled = read(env, 'OTEL_SDK_DISABLED')
  if (disabled !== undefined && disabled.toLowerCase() !== 'true' && disabled.toLowerCase() !== 'false')
    throw new ConfigError('OTEL_SDK_DISABLED', `must be true or false, got "${disabled}"`)
  const endpoint = parseEndpoint(env)
  const headers = {
    ...parsePairs(env, 'OTEL_EXPORTER_OTLP_HEADERS'),
    ...parsePairs(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'),
  }
  const timeoutName =
    read(env, 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') === undefined
      ? 'OTEL_EXPORTER_OTLP_TIMEOUT'
      : 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT'
  const settings: TraceSettings = {
    endpoint: endpoint ?? '',
    protocol: parseProtocol(env),
    headers: Object.freeze(headers),
    exportTimeoutMs: parseWhole(env, timeoutName, 10_000, 1, 3_600_000),
    serviceName: read(env, 'OTEL_SERVICE_NAME') ?? 'tenancy-gateway',
    resourceAttributes: Object.freeze(parsePairs(env, 'OTEL_RESOURCE_ATTRIBUTES')),
    ...parseSampler(env),
    batch: Object.freeze(parseBatch(env)),
    clientContext: parseClientContext(env),
  }
  if (endpoint === null || disabled?.toLowerCase() === 'true') return null
  return Object.freeze(settings)
}

/** TRACE_URL_TEMPLATE: a trace's page, `{trace_id}` standing for its id; null when unset. */
export function parseTraceUrlTemplate(env: Env): string | null {
  const raw = parseUrl(env, 'TRACE_URL_TEMPLATE', ['http:', 'https:'])
  if (raw === undefined) return null
  if (!raw.includes('{trace_id}'))
    throw new ConfigError(
      'TRACE_URL_TEMPLATE',
      'must hold {trace_id}, where the trace id goes (https://grafana.example/explore?trace={trace_id})',
    )
  return raw
}
