// What marks a request as an upgrade, asked before routing (guards.ts, error-handler.ts) and by the
// proxy's WebSocket handshake.
import type { IncomingMessage } from 'node:http'

/** Node's flag of a request it handed to the 'upgrade' listener (@fastify/http-proxy's, when a route carries WebSockets). */
export function isUpgrade(raw: IncomingMessage): boolean {
  return (raw as { upgrade?: boolean }).upgrade === true
}

/** `Upgrade: websocket` (a token list, any case), as a request without Node's upgrade flag may carry it. */
export function asksForWebSocket(upgrade: string | undefined): boolean {
  return upgrade !== undefined && /(^|[\s,])websocket($|[\s,])/i.test(upgrade)
}
