// The browser's credential (docs/api.md, WebSockets): a browser cannot set Authorization on a
// WebSocket, so the key or an access token may come as one subprotocol, `tgw.bearer.<credential>`,
// among the application's own. It is taken out of the list here; the upstream sees the rest.

export const BEARER_PROTOCOL_PREFIX = 'tgw.bearer.'

export interface OfferedProtocols {
  /** The credential of the `tgw.bearer.` entry; null when there is none. */
  readonly credential: string | null
  /** How many `tgw.bearer.` entries were offered (more than one is refused). */
  readonly bearerEntries: number
  /** The application's subprotocols, in the client's order: what the upstream is offered. */
  readonly application: readonly string[]
}

const NONE: OfferedProtocols = { credential: null, bearerEntries: 0, application: [] }

/** RFC 9110 §5.6.2: what a subprotocol's name is made of (RFC 6455 §4.1). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const OPTIONAL_WHITESPACE = /^[ \t]+|[ \t]+$/g

/**
 * What is wrong with a `Sec-WebSocket-Protocol` list, or null when nothing is: each entry must be a
 * token, and none may come twice (RFC 6455 §4.1). ws refuses such a list on either side, the
 * upstream's socket included: it is refused before anything is taken or dialled.
 */
export function subprotocolListProblem(header: string | string[] | undefined): string | null {
  if (header === undefined) return null
  // Entries are told by their place, never quoted: one of them may hold the browser's credential.
  const seen = new Map<string, number>()
  for (const value of Array.isArray(header) ? header : [header]) {
    for (const entry of value.split(',')) {
      const place = seen.size + 1
      // Spaces and tabs only, as ws's own reading of the list (String.trim would take more).
      const protocol = entry.replace(OPTIONAL_WHITESPACE, '')
      if (protocol === '')
        return `Sec-WebSocket-Protocol: entry ${place} is empty; separate subprotocols with single commas`
      if (!TOKEN.test(protocol))
        return `Sec-WebSocket-Protocol: entry ${place} is not a subprotocol name (letters, digits and !#$%&'*+-.^_\`|~ only)`
      const first = seen.get(protocol)
      if (first !== undefined)
        return `Sec-WebSocket-Protocol: entry ${place} repeats entry ${first}; offer each subprotocol once`
      seen.set(protocol, place)
    }
  }
  return null
}

/** Reads `Sec-WebSocket-Protocol` (Node joins repeated headers with ", "). */
export function offeredProtocols(header: string | string[] | undefined): OfferedProtocols {
  if (header === undefined) return NONE
  let credential: string | null = null
  let bearerEntries = 0
  const application: string[] = []
  for (const value of Array.isArray(header) ? header : [header]) {
    for (const entry of value.split(',')) {
      const protocol = entry.trim()
      if (protocol === '') continue
      if (protocol.startsWith(BEARER_PROTOCOL_PREFIX)) {
        bearerEntries++
        credential = protocol.slice(BEARER_PROTOCOL_PREFIX.length)
      } else application.push(protocol)
    }
  }
  return { credential, bearerEntries, application }
}

/**
 * The subprotocol the gateway answers the client with: the upstream's choice. When the upstream
 * chose none and the client offered nothing but its credential, that entry: a browser fails a
 * handshake that names no subprotocol when it offered one (RFC 6455 §4.1), and the value goes back
 * only to the client that sent it
 * (docs/decisions/0098-the-browsers-credential-as-a-subprotocol-answered.md).
 */
export function answeredProtocol(offered: ReadonlySet<string>, upstreamChoice: string): string | false {
  if (upstreamChoice !== '') return offered.has(upstreamChoice) ? upstreamChoice : false
  if (offered.size === 1) {
    const [only] = offered
    if (only!.startsWith(BEARER_PROTOCOL_PREFIX)) return only!
  }
  return false
}
