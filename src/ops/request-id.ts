// Request ids (DESIGN §5 X-Request-Id) as UUIDv7 (RFC 9562 §5.7): the Unix millisecond, a counter
// within it (§6.2, method 1, in rand_a), and 62 random bits drawn afresh each millisecond (rand_b).
// Every proxied request gets one, so it is built from two cached strings and a table lookup:
// crypto.randomUUID() builds its 36 characters from sixteen pieces, and cost the gateway about
// 0.5 KB of garbage per request. Ids sort by time within a process, which reads well in logs.
import { randomFillSync } from 'node:crypto'

/** rand_a's twelve bits: the counter's values, formatted once. */
const COUNTER_HEX = Array.from({ length: 4096 }, (_, i) => i.toString(16).padStart(3, '0'))

/** A source of request ids on a clock (tests give a fixed one). */
export function requestIdSource(now: () => number = Date.now): () => string {
  const random = new Uint8Array(8)
  let currentMs = -1
  /** `tttttttt-tttt-7` for currentMs. */
  let head = ''
  /** `-vrrr-rrrrrrrrrrrr`: the variant bits and 62 random bits, drawn for currentMs. */
  let tail = ''
  let counter = 0

  function startMillisecond(ms: number): void {
    currentMs = ms
    counter = 0
    const time = ms.toString(16).padStart(12, '0')
    head = `${time.slice(0, 8)}-${time.slice(8, 12)}-7`
    randomFillSync(random)
    random[0] = (random[0]! & 0x3f) | 0x80 // the variant: 10xx
    tail = `-${hex(random, 0, 2)}-${hex(random, 2, 8)}`
  }

  return function newRequestId(): string {
    const ms = now()
    // A clock that stepped back keeps the last millisecond (ids stay in order); 4,096 ids in one
    // millisecond move on to the next, as §6.2 allows.
    if (ms > currentMs) startMillisecond(ms)
    else if (counter === COUNTER_HEX.length) startMillisecond(currentMs + 1)
    return head + COUNTER_HEX[counter++]! + tail
  }
}

function hex(bytes: Uint8Array, from: number, to: number): string {
  let out = ''
  for (let i = from; i < to; i++) out += (bytes[i]! < 16 ? '0' : '') + bytes[i]!.toString(16)
  return out
}

/** A new UUIDv7; unique within the process, and across processes but for a 2^-62 chance per millisecond. */
export const newRequestId = requestIdSource()
