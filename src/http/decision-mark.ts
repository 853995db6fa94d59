// A request that arrived on AUTHZ_PORT (forward-auth/listener.ts) to be decided, not proxied: the
// listener marks the raw request before it hands it to the app's router, so that the proxy's steps
// run for it and its route answers the decision instead of calling the upstream
// (proxy/decision.ts). A mark is a symbol on the raw request: nothing a client sends on PORT can
// set it, and no header can forge it.
import type { IncomingMessage } from 'node:http'

/** Which endpoint asked (docs/forward-auth.md): how the answer is shaped for the asking proxy. */
export type DecisionKind = 'nginx' | 'forward-auth' | 'envoy' | 'verify'

export interface DecisionMark {
  readonly kind: DecisionKind
  /** Request units to count, when the caller named them (`/verify`'s `cost`); null: the route's. */
  readonly cost: number | null
}

const MARK = Symbol('tgw.decision')

type Marked = IncomingMessage & { [MARK]?: DecisionMark }

export function markDecision(raw: IncomingMessage, mark: DecisionMark): void {
  ;(raw as Marked)[MARK] = mark
}

/** The request's mark; null for every request that came in on PORT. */
export function decisionOf(raw: IncomingMessage): DecisionMark | null {
  return (raw as Marked)[MARK] ?? null
}

/**
 * Whether the request was let through by a decision: it counts as a forwarded request would
 * (usage, quotas, billing, the request log's `forwarded`), since the asking proxy forwards it.
 */
export function decidedAllowed(raw: IncomingMessage, statusCode: number): boolean {
  return statusCode === 200 && (raw as Marked)[MARK] !== undefined
}
