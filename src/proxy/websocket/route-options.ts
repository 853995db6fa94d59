// A route's WebSocket options (docs/configuration.md, routes): `websocket: true` lets its upgrades
// through, under the same checks as any request, and four bounds govern the open sockets.

export interface RouteWebSocket {
  /** Open sockets one resolved tenant may hold on the route (on this replica); past it, 429. */
  readonly maxPerTenant: number
  /**
   * Open sockets of one parent account's keys (its own and all its sub-accounts') on the route (on
   * this replica), past it 429: creating sub-accounts buys no more sockets. null: half of the
   * replica's MAX_CONNECTIONS (the runtime knows it).
   */
  readonly maxPerAccount: number | null
  /** A socket on which neither side sent a frame (pings count) for this long is closed (1001). */
  readonly idleTimeoutMs: number
  /** A message over this size, either way, closes the socket with 1009. */
  readonly maxMessageBytes: number
}

export const DEFAULT_MAX_WEBSOCKETS_PER_TENANT = 100

/** A route's `max_websockets_per_account` when unset: half of the replica's MAX_CONNECTIONS. */
export function defaultMaxWebSocketsPerAccount(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 2))
}
export const DEFAULT_WEBSOCKET_IDLE_TIMEOUT_MS = 300_000
export const DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES = 1024 * 1024

export const WEBSOCKET_KEYS = [
  'websocket',
  'max_websockets_per_tenant',
  'max_websockets_per_account',
  'websocket_idle_timeout_ms',
  'websocket_max_message_bytes',
] as const

/** Checks a route's WebSocket keys; `fail` throws the route table's one-line error (it names the route). */
export function parseRouteWebSocket(
  entry: Readonly<Record<string, unknown>>,
  fail: (problem: string) => never,
): RouteWebSocket | null {
  const { websocket } = entry
  if (websocket !== undefined && typeof websocket !== 'boolean') fail('websocket must be true or false')
  if (websocket !== true) {
    const stray = WEBSOCKET_KEYS.slice(1).find((key) => entry[key] !== undefined)
    if (stray !== undefined) fail(`${stray} needs websocket: true`)
    return null
  }
  const whole = <F extends number | null>(key: string, fallback: F): number | F => {
    const value = entry[key]
    if (value === undefined) return fallback
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0)
      fail(`${key} must be a positive whole number`)
    return value
  }
  return Object.freeze({
    maxPerTenant: whole('max_websockets_per_tenant', DEFAULT_MAX_WEBSOCKETS_PER_TENANT),
    maxPerAccount: whole('max_websockets_per_account', null),
    idleTimeoutMs: whole('websocket_idle_timeout_ms', DEFAULT_WEBSOCKET_IDLE_TIMEOUT_MS),
    maxMessageBytes: whole('websocket_max_message_bytes', DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES),
  })
}
