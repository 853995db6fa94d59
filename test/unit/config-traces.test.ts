// The trace settings (docs/configuration.md, Traces): off without an endpoint, the specification's
// defaults and precedence, and a start-up error naming the variable for every bad value.
import t from 'tap'
import { ConfigError, loadConfig } from '../../src/config.js'
import { parseTraceSettings, parseTraceUrlTemplate } from '../../src/config-traces.js'
import { startGateway } from '../../src/start.js'

const ROOT = new URL('../../', import.meta.url).pathname
const ON = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }

t.test('off unless an OTLP endpoint is set', async (t) => {
  t.equal(loadConfig({}, ROOT).traces, null)
  t.equal(loadConfig({}, ROOT).traceUrlTemplate, null)
  t.equal(parseTraceSettings({ ...ON, OTEL_SDK_DISABLED: 'true' }), null, 'OTEL_SDK_DISABLED=true turns it off')
  t.equal(parseTraceSettings({ OTEL_SERVICE_NAME: 'x' }), null)
})

t.test("the specification's defaults, and its precedence", async (t) => {
  const settings = parseTraceSettings(ON)!
  t.equal(settings.endpoint, 'http://collector:4318/v1/traces', 'the base endpoint gains the signal path')
  t.equal(settings.protocol, 'http/protobuf')
  t.equal(settings.exportTimeoutMs, 10_000)
  t.equal(settings.serviceName, 'tenancy-gateway')
  t.equal(settings.sampler, 'parentbased_always_on')
  t.same(settings.batch, {
    scheduledDelayMs: 5000,
    exportTimeoutMs: 30_000,
    maxQueueSize: 2048,
    maxExportBatchSize: 512,
  })
  t.equal(settings.clientContext, 'continue')

  const given = parseTraceSettings({
    ...ON,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/custom',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Basic%20abc, x-tenant = one',
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-tenant=two',
    OTEL_EXPORTER_OTLP_TIMEOUT: '2500',
    OTEL_SERVICE_NAME: 'edge',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod,service.namespace=api',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.01',
    OTEL_BSP_MAX_QUEUE_SIZE: '100',
    TRACE_CLIENT_CONTEXT: 'ignore',
  })!
  t.equal(given.endpoint, 'https://traces.example/custom', 'the traces endpoint is taken as it is')
  t.equal(given.protocol, 'http/json')
  t.same(given.headers, { authorization: 'Basic abc', 'x-tenant': 'two' }, 'decoded; the traces headers win')
  t.equal(given.exportTimeoutMs, 2500)
  t.equal(given.serviceName, 'edge')
  t.same(given.resourceAttributes, { 'deployment.environment.name': 'prod', 'service.namespace': 'api' })
  t.equal(given.samplerRatio, 0.01)
  t.equal(given.batch.maxExportBatchSize, 100, 'the batch fits the smaller queue')
  t.equal(given.clientContext, 'ignore')
  t.equal(
    parseTraceUrlTemplate({ TRACE_URL_TEMPLATE: 'https://grafana.example/explore?trace={trace_id}' }),
    'https://grafana.example/explore?trace={trace_id}',
  )
})

const BAD: [Record<string, string>, string, RegExp][] = [
  [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, 'OTEL_EXPORTER_OTLP_ENDPOINT', /http:\/\//],
  [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://collector' }, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', /http/],
  [{ ...ON, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'OTEL_EXPORTER_OTLP_PROTOCOL', /grpc is not supported/],
  [{ ...ON, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'json' }, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', /http\/json/],
  [{ ...ON, OTEL_EXPORTER_OTLP_HEADERS: 'api-key' }, 'OTEL_EXPORTER_OTLP_HEADERS', /key=value/],
  [{ ...ON, OTEL_EXPORTER_OTLP_HEADERS: 'api-key=%E0%A4%A' }, 'OTEL_EXPORTER_OTLP_HEADERS', /percent-encoding/],
  [{ ...ON, OTEL_EXPORTER_OTLP_TIMEOUT: '10s' }, 'OTEL_EXPORTER_OTLP_TIMEOUT', /whole number/],
  [{ ...ON, OTEL_RESOURCE_ATTRIBUTES: '=x' }, 'OTEL_RESOURCE_ATTRIBUTES', /key=value/],
  [{ ...ON, OTEL_TRACES_SAMPLER: 'sometimes' }, 'OTEL_TRACES_SAMPLER', /parentbased_always_on/],
  [{ ...ON, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }, 'OTEL_TRACES_SAMPLER_ARG', /0 to 1/],
  [{ ...ON, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' }, 'OTEL_TRACES_SAMPLER_ARG', /ratio/],
  [{ ...ON, OTEL_BSP_SCHEDULE_DELAY: '-1' }, 'OTEL_BSP_SCHEDULE_DELAY', /whole number/],
  [{ ...ON, OTEL_BSP_EXPORT_TIMEOUT: '0' }, 'OTEL_BSP_EXPORT_TIMEOUT', /from 1/],
  [{ ...ON, OTEL_BSP_MAX_QUEUE_SIZE: 'lots' }, 'OTEL_BSP_MAX_QUEUE_SIZE', /whole number/],
  [
    { ...ON, OTEL_BSP_MAX_QUEUE_SIZE: '10', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '20' },
    'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    /at most OTEL_BSP_MAX_QUEUE_SIZE/,
  ],
  [{ ...ON, OTEL_SDK_DISABLED: 'yes' }, 'OTEL_SDK_DISABLED', /true or false/],
  [{ TRACE_CLIENT_CONTEXT: 'trust' }, 'TRACE_CLIENT_CONTEXT', /continue or ignore/],
  [{ TRACE_URL_TEMPLATE: 'https://grafana.example/explore' }, 'TRACE_URL_TEMPLATE', /\{trace_id\}/],
  // Checked with tracing off too: the mistake stops this deploy, not the one that turns it on.
  [{ OTEL_TRACES_SAMPLER: 'sometimes' }, 'OTEL_TRACES_SAMPLER', /one of/],
]

t.test('a bad value is a start-up error that names its variable', async (t) => {
  for (const [env, variable, problem] of BAD) {
    let error: unknown = null
    try {
      loadConfig(env, ROOT)
    } catch (err) {
      error = err
    }
    t.ok(error instanceof ConfigError, `${variable}: a ConfigError`)
    t.equal((error as ConfigError).variable, variable, `${JSON.stringify(env)} names ${variable}`)
    t.match((error as Error).message, problem)
  }
})

t.test('the header values, a collector credential, are never in the message', async (t) => {
  let message = ''
  try {
    loadConfig({ ...ON, OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20sekrit,broken' }, ROOT)
  } catch (err) {
    message = (err as Error).message
  }
  t.match(message, /OTEL_EXPORTER_OTLP_HEADERS/)
  t.notMatch(message, /sekrit/)
})

t.test('the gateway does not start on one, and says which', async (t) => {
  const lines: string[] = []
  let code: number | null = null
  const started = await startGateway(
    { ...ON, OTEL_TRACES_SAMPLER: 'sometimes' },
    { stdout: { write: () => true }, stderr: (line) => lines.push(line), exit: (c) => (code = c), on: () => {} },
  )
  t.equal(started, null)
  t.equal(code, 1)
  t.match(lines.join(''), /invalid configuration: OTEL_TRACES_SAMPLER must be one of/)
})
