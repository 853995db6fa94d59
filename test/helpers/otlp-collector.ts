// An OTLP/HTTP trace receiver of the test's own, on loopback: it takes what the gateway's exporter
// posts to /v1/traces, in http/protobuf (decoded with the OpenTelemetry protobuf definitions, the
// otlp-transformer's generated root) or http/json, keeps every byte it was sent (for the scan
// for secrets), and answers as the test says: accept, refuse, or hang.
import { createRequire } from 'node:module'
import { createServer, type IncomingMessage } from 'node:http'
import { listenOnLoopback } from './upstream.js'
import type { TestLike } from './test-like.js'

const require = createRequire(import.meta.url)
/** The protobufjs root generated from opentelemetry-proto (an older otlp-transformer's, a dev dependency). */
const root = require('otlp-proto-root/build/src/generated/root.js') as {
  opentelemetry: {
    proto: {
      collector: {
        trace: {
          v1: {
            ExportTraceServiceRequest: {
              decode(bytes: Uint8Array): unknown
              toObject(message: unknown, options: Record<string, unknown>): unknown
            }
          }
        }
      }
    }
  }
}
const ExportTraceServiceRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest

/** A span as received, its ids in hex and its attributes as plain values. */
export interface ReceivedSpan {
  name: string
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number
  traceId: string
  spanId: string
  /** '' for a root span. */
  parentSpanId: string
  attributes: Record<string, unknown>
  links: { traceId: string; spanId: string }[]
  events: { name: string; attributes: Record<string, unknown> }[]
  /** OTLP's StatusCode: 0 unset, 1 ok, 2 error. */
  statusCode: number
  /** The resource's attributes (service.name…). */
  resource: Record<string, unknown>
}

export type CollectorMode = 'accept' | 'refuse' | 'hang'

export interface Collector {
  /** http://127.0.0.1:<port>: OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string
  spans: ReceivedSpan[]
  /** Every request body as it came, for the scan for secrets. */
  bodies: Buffer[]
  /** Content types of the posts, as sent. */
  contentTypes: string[]
  /** Headers of the posts (OTEL_EXPORTER_OTLP_HEADERS arrive here). */
  headers: IncomingMessage['headers'][]
  /** Posts received, whatever was answered. */
  posts: number
  mode: CollectorMode
  close(): Promise<void>
}

type AnyValue = {
  stringValue?: string
  intValue?: string | number
  doubleValue?: number
  boolValue?: boolean
  arrayValue?: { values?: AnyValue[] }
}

function plainValue(value: AnyValue | undefined): unknown {
  if (value === undefined) return undefined
  if (value.stringValue !== undefined) return value.stringValue
  if (value.intValue !== undefined) return Number(value.intValue)
  if (value.doubleValue !== undefined) return value.doubleValue
  if (value.boolValue !== undefined) return value.boolValue
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(plainValue)
  return undefined
}

function attributesOf(list: { key: string; value?: AnyValue }[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, plainValue(value)]))
}

/** An id as hex: protobuf's bytes arrive as base64 (toObject), JSON's as hex already. */
function hexId(id: string | undefined, fromProtobuf: boolean): string {
  if (id === undefined || id === '') return ''
  return fromProtobuf ? Buffer.from(id, 'base64').toString('hex') : id
}

type RawSpan = {
  name: string
  kind?: number
  traceId: string
  spanId: string
  parentSpanId?: string
  attributes?: { key: string; value?: AnyValue }[]
  links?: { traceId: string; spanId: string }[]
  events?: { name: string; attributes?: { key: string; value?: AnyValue }[] }[]
  status?: { code?: number }
}
type RawRequest = {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value?: AnyValue }[] }
    scopeSpans?: { spans?: RawSpan[] }[]
  }[]
}

/** The spans of one export request, protobuf or JSON. */
export function spansOf(body: Buffer, contentType: string): ReceivedSpan[] {
  const protobuf = contentType.includes('protobuf')
  const request = (
    protobuf
      ? ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), {
          longs: String,
          bytes: String,
          enums: Number,
          defaults: false,
        })
      : JSON.parse(body.toString('utf8'))
  ) as RawRequest
  const spans: ReceivedSpan[] = []
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = attributesOf(resourceSpans.resource?.attributes)
    for (const scope of resourceSpans.scopeSpans ?? [])
      for (const span of scope.spans ?? [])
        spans.push({
          name: span.name,
          kind: span.kind ?? 0,
          traceId: hexId(span.traceId, protobuf),
          spanId: hexId(span.spanId, protobuf),
          parentSpanId: hexId(span.parentSpanId, protobuf),
          attributes: attributesOf(span.attributes),
          links: (span.links ?? []).map((link) => ({
            traceId: hexId(link.traceId, protobuf),
            spanId: hexId(link.spanId, protobuf),
          })),
          events: (span.events ?? []).map((event) => ({
            name: event.name,
            attributes: attributesOf(event.attributes),
          })),
          statusCode: span.status?.code ?? 0,
          resource,
        })
  }
  return spans
}

export async function startCollector(t: TestLike, mode: CollectorMode = 'accept'): Promise<Collector> {
  const collector: Collector = {
    url: '',
    spans: [],
    bodies: [],
    contentTypes: [],
    headers: [],
    posts: 0,
    mode,
    close: async () => {},
  }
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('error', () => {})
    request.on('end', () => {
      collector.posts++
      const body = Buffer.concat(chunks)
      collector.bodies.push(body)
      const type = request.headers['content-type'] ?? ''
      collector.contentTypes.push(type)
      collector.headers.push(request.headers)
      // Never answered: its connection ends when the collector closes.
      if (collector.mode === 'hang') return
      if (collector.mode === 'refuse') {
        response.writeHead(400, { 'content-type': 'text/plain' }).end('refused')
        return
      }
      collector.spans.push(...spansOf(body, type))
      response.writeHead(200, { 'content-type': type.includes('json') ? 'application/json' : type }).end()
    })
  })
  server.on('clientError', (_err, socket) => socket.destroy())
  const { port, close } = await listenOnLoopback(t, server)
  collector.url = `http://127.0.0.1:${port}`
  collector.close = close
  return collector
}
