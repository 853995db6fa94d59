// The OpenTelemetry SDK as the gateway runs it (docs/operations.md, Traces): a tracer provider of
// its own (never the global one: an app built twice in a process, as the tests do, keeps two), the
// configured sampler, and a batch span processor in front of the OTLP exporter. Loaded by
// traces/plugin.ts only when tracing is on, so that a gateway without it loads none of the SDK.
import { createNoopMeter, type Meter, type MeterProvider, type Tracer } from '@opentelemetry/api'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type Sampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace'
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions'
import type { TraceSettings } from '../config-traces.js'
import { ids } from './ids.js'

/** The SDK's running parts, as the plugin holds them. */
export interface Tracing {
  readonly tracer: Tracer
  /** The tracer's sampler, asked once before a request's server span (request-span.ts). */
  readonly sampler: Sampler
  /** Sends what is queued, then stops; gives up after `boundMs` (the stop's bound): spans are lost, never the stop. */
  shutdown(boundMs: number): Promise<void>
}

/** The sampler OTEL_TRACES_SAMPLER names, as the specification defines each. */
export function samplerOf(settings: Pick<TraceSettings, 'sampler' | 'samplerRatio'>): Sampler {
  const ratio = new TraceIdRatioBasedSampler(settings.samplerRatio)
  switch (settings.sampler) {
    case 'always_on':
      return new AlwaysOnSampler()
    case 'always_off':
      return new AlwaysOffSampler()
    case 'traceidratio':
      return ratio
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() })
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio })
  }
}

/**
 * The batch processor reports what it lost through the SDK's own self-observability counter,
 * `otel.sdk.processor.span.processed`, with `error.type` on the spans that were not exported (a
 * full queue, a failed or timed-out export). Only that counter is kept: every other instrument is
 * the API's no-op.
 */
function dropsReportedTo(onDropped: (spans: number) => void): MeterProvider {
  const noop = createNoopMeter()
  const meter: Meter = Object.create(noop)
  meter.createCounter = (name, options) => {
    if (name !== 'otel.sdk.processor.span.processed') return noop.createCounter(name, options)
    return {
      add(value, attributes) {
        if (attributes?.['error.type'] !== undefined) onDropped(value)
      },
    }
  }
  return { getMeter: () => meter }
}

/** Starts the SDK on `settings`; `onDropped` hears of every span lost, however it was. */
export function startTracing(settings: TraceSettings, onDropped: (spans: number) => void): Tracing {
  const exporterOptions = {
    url: settings.endpoint,
    headers: { ...settings.headers },
    timeoutMillis: settings.exportTimeoutMs,
  }
  const exporter =
    settings.protocol === 'http/json' ? new JsonExporter(exporterOptions) : new ProtobufExporter(exporterOptions)
  const processor = new BatchSpanProcessor({
    exporter,
    maxQueueSize: settings.batch.maxQueueSize,
    maxExportBatchSize: settings.batch.maxExportBatchSize,
    scheduledDelayMillis: settings.batch.scheduledDelayMs,
    exportTimeoutMillis: settings.batch.exportTimeoutMs,
    selfObsMeterProvider: dropsReportedTo(onDropped),
  })
  const sampler = samplerOf(settings)
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      ...settings.resourceAttributes,
      // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES (the specification).
      [ATTR_SERVICE_NAME]: settings.serviceName,
    }),
    sampler,
    idGenerator: ids,
    spanProcessors: [processor],
  })
  return {
    tracer: provider.getTracer('tenancy-gateway'),
    sampler,
    async shutdown(boundMs) {
      let timer: NodeJS.Timeout | undefined
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, boundMs)
      })
      try {
        // A collector that hangs or refuses costs its spans, never the stop: the error is the
        // processor's to count, the wait is the bound's.
        await Promise.race([provider.shutdown().catch(() => {}), bound])
      } finally {
        clearTimeout(timer)
      }
    },
  }
}
