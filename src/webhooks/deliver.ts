// One webhook delivery (Standard Webhooks): the signed POST, sent over a connection whose address is
// checked when it is made, not only when the endpoint was created
// (docs/decisions/0129-the-address-is-checked-when-the-connection-is-made.md). Used by the webhook
// delivery worker (worker.ts).
import { isIP, type LookupFunction } from 'node:net'
import { Agent, buildConnector, type Dispatcher, request } from 'undici'
import { signWebhook } from './signature.js'
import {
  checkName,
  defaultLookup,
  forbiddenAddressReason,
  type LookupAll,
  parseWebhookUrl,
  WebhookUrlError,
} from './url-policy.js'

/** What a delivery needs of an event: its id, type and time; the whole event is `data`. */
export interface WebhookEvent {
  readonly id: string
  readonly type: string
  readonly created_at: string
  readonly [field: string]: unknown
}

export interface DeliveryOptions {
  /** WEBHOOKS_ALLOW_INSECURE: http and any address (development, tests). */
  readonly allowInsecure?: boolean
  /** Resolves names at connect time; node:dns lookup by default. */
  readonly lookup?: LookupAll
  /** The whole attempt, connection to last byte read: 15 s by default. */
  readonly timeoutMs?: number
  /** Extra trusted certificates (tests' self-signed receivers). */
  readonly ca?: string | Buffer
  /** The send time, for `webhook-timestamp`; now by default. */
  readonly now?: () => Date
  /** Cuts the attempt short (the worker is stopping); the result then says `aborted`. */
  readonly signal?: AbortSignal
}

/** `status` is the HTTP status or null when none came; `error` is null only for a 2xx. */
export interface DeliveryResult {
  readonly status: number | null
  readonly error: string | null
  readonly durationMs: number
}

export const DELIVERY_TIMEOUT_MS = 15_000
/** At most this much of a response body is read, then the connection is dropped. */
export const RESPONSE_BODY_CAP_BYTES = 4096

/**
 * A net/tls `lookup` that resolves with `lookupAll`, refuses the name if ANY address is forbidden,
 * and hands on only the addresses it checked: the socket connects to nothing else.
 */
export function checkedLookup(lookupAll: LookupAll): LookupFunction {
  return (hostname, options, callback) => {
    checkName(hostname, lookupAll).then(
      (addresses) => {
        const family = options.family === 4 || options.family === 6 ? options.family : 0
        const usable = addresses.filter((a) => family === 0 || a.family === family)
        if (options.all) return (callback as (e: null, a: typeof usable) => void)(null, usable)
        const first = usable[0]
        if (first === undefined)
          return callback(Object.assign(new Error(`${hostname}: no address`), { code: 'ENOTFOUND' }), '', 0)
        callback(null, first.address, first.family)
      },
      (err: Error) => callback(err as NodeJS.ErrnoException, '', 0),
    )
  }
}

/** An undici connector that refuses forbidden addresses before connecting and checks the peer after. */
function checkedConnector(options: DeliveryOptions): buildConnector.connector {
  const base = buildConnector({
    timeout: options.timeoutMs ?? DELIVERY_TIMEOUT_MS,
    lookup: checkedLookup(options.lookup ?? defaultLookup),
    ...(options.ca ? { ca: options.ca } : {}),
  })
  return (opts, callback) => {
    const literal = isIP(opts.hostname.replace(/^\[|\]$/g, '')) === 0 ? null : opts.hostname.replace(/^\[|\]$/g, '')
    const before = literal === null ? null : forbiddenAddressReason(literal)
    if (before !== null) return callback(new WebhookUrlError(`refused: ${before}`), null)
    base(opts, (err, socket) => {
      if (err !== null) return callback(err, null)
      // The address actually connected to: a second guard should a lookup slip past the first.
      const peer = socket.remoteAddress
      const after = peer === undefined ? 'the peer address is unknown' : forbiddenAddressReason(peer)
      if (after !== null) {
        socket.destroy()
        // The peer address stays out of the delivery record: the parent sees only that it was refused.
        return callback(new WebhookUrlError('refused: the connected address is not allowed'), null)
      }
      callback(null, socket)
    })
  }
}

function dispatcherFor(options: DeliveryOptions, timeoutMs: number): Dispatcher {
  const limits = { headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connections: 1, pipelining: 0 }
  if (options.allowInsecure)
    return new Agent({ ...limits, connect: { timeout: timeoutMs, ...(options.ca ? { ca: options.ca } : {}) } })
  return new Agent({ ...limits, connect: checkedConnector(options) })
}

/** Reads at most `cap` bytes of `body`, then drops the rest (and the connection with it). */
async function drain(body: Dispatcher.ResponseData['body'], cap: number): Promise<void> {
  let read = 0
  for await (const chunk of body) {
    read += (chunk as Buffer).length
    if (read >= cap) break
  }
  if (read >= cap) body.destroy()
}

const TIMEOUT_CODES = ['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']

function reasonOf(err: unknown, timedOut: boolean): string {
  if (timedOut) return 'timeout'
  if (err instanceof WebhookUrlError) return err.message
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } }
  if (e.cause instanceof WebhookUrlError) return e.cause.message
  const code = e.code ?? e.cause?.code
  if (code !== undefined && TIMEOUT_CODES.includes(code)) return 'timeout'
  return code ? `connection failed: ${code}` : `connection failed: ${e.message ?? 'error'}`
}

/** Non-2xx statuses as the delivery log shows them; 3xx and 410 spelled out for the worker. */
function statusError(status: number): string | null {
  if (status >= 200 && status < 300) return null
  if (status === 410) return 'HTTP 410: the endpoint is gone'
  if (status >= 300 && status < 400) return `HTTP ${status}: redirects are not followed`
  return `HTTP ${status}`
}

/** POSTs `event` to `url`, signed with `secret` (`whsec_…`). Never throws. */
export function deliverWebhook(
  url: string,
  secret: string,
  event: WebhookEvent,
  options: DeliveryOptions = {},
): Promise<DeliveryResult> {
  const body = JSON.stringify({ type: event.type, timestamp: event.created_at, data: event })
  return postSigned(
    url,
    secret,
    { id: event.id, body, contentType: 'application/json', userAgent: 'tenancy-gateway-webhooks' },
    options,
  )
}

/** A signed message: its `webhook-id`, body and media type, and who sends it. */
export interface SignedMessage {
  readonly id: string
  readonly body: string
  readonly contentType: string
  readonly userAgent: string
}

/** POSTs a message to `url`, signed with `secret` as Standard Webhooks say (the usage export's too). Never throws. */
export async function postSigned(
  url: string,
  secret: string,
  message: SignedMessage,
  options: DeliveryOptions = {},
): Promise<DeliveryResult> {
  const started = performance.now()
  const durationMs = () => Math.round(performance.now() - started)
  const timeoutMs = options.timeoutMs ?? DELIVERY_TIMEOUT_MS
  let target: URL
  try {
    target = parseWebhookUrl(url, options)
  } catch (err) {
    return { status: null, error: (err as Error).message, durationMs: durationMs() }
  }
  // The address rules run when the connection is made (checkedConnector), on every attempt.
  const timestamp = Math.floor((options.now?.() ?? new Date()).getTime() / 1000)
  const { id, body } = message
  let signature: string
  try {
    signature = signWebhook(secret, id, timestamp, body)
  } catch (err) {
    return { status: null, error: (err as Error).message, durationMs: durationMs() }
  }
  const dispatcher = dispatcherFor(options, timeoutMs)
  const timeout = AbortSignal.timeout(timeoutMs)
  const signal = options.signal === undefined ? timeout : AbortSignal.any([timeout, options.signal])
  try {
    const response = await request(target, {
      method: 'POST',
      dispatcher,
      signal,
      headers: {
        'content-type': message.contentType,
        'user-agent': message.userAgent,
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signature,
      },
      body,
    })
    try {
      await drain(response.body, RESPONSE_BODY_CAP_BYTES)
    } catch {
      // The status came; a body cut short or too slow changes nothing.
    }
    return { status: response.statusCode, error: statusError(response.statusCode), durationMs: durationMs() }
  } catch (err) {
    if (options.signal?.aborted) return { status: null, error: 'aborted', durationMs: durationMs() }
    return { status: null, error: reasonOf(err, timeout.aborted), durationMs: durationMs() }
  } finally {
    dispatcher.destroy().catch(() => {})
  }
}
