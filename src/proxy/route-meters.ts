// A route's units (docs/configuration.md, routes; docs/api.md, Units): `cost`, the request units
// one forwarded request counts for, and `meters`, the units its upstream reports in a response
// header or trailer. Apart from route-table.ts, as their rules are many.
import { METER_NAME } from '../shared/tenant-limits.js'
import type { RouteMeter } from './route.js'

export const METER_KEYS = ['cost', 'meters'] as const
export const MAX_COST = 1_000_000
export const MAX_METERS = 8
const METER_ENTRY_KEYS = new Set(['name', 'header', 'expose'])
// A header field name (RFC 9110 §5.1: a token).
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/
/**
 * Headers that frame or route the answer, or that the gateway sets or drops itself: an upstream
 * cannot report units in one of them, as removing it would break the answer.
 */
const ANSWER_FRAMING = new Set([
  'connection',
  'content-length',
  'content-type',
  'content-encoding',
  'keep-alive',
  'location',
  'proxy-connection',
  'set-cookie',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'x-request-id',
])

type Fail = (problem: string) => never

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** The request units one forwarded request of the route counts for: 1 unless `cost` says otherwise. */
export function parseCost(value: unknown, fail: Fail): number {
  if (value === undefined) return 1
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > MAX_COST)
    fail(`cost must be a whole number from 1 to ${MAX_COST}`)
  return value
}

/** The meters a route's upstream reports, in the order given; none unless `meters` lists some. */
export function parseMeters(value: unknown, fail: Fail): readonly RouteMeter[] {
  if (value === undefined) return []
  if (!Array.isArray(value)) fail('meters must be a list of {name, header} mappings')
  if (value.length > MAX_METERS) fail(`meters may list at most ${MAX_METERS} meters`)
  const meters: RouteMeter[] = []
  value.forEach((entry: unknown, index) => {
    const where = `meters[${index}]`
    if (!isMapping(entry)) fail(`${where} must be a mapping with name and header`)
    for (const key of Object.keys(entry)) {
      if (!METER_ENTRY_KEYS.has(key))
        fail(`${where}: unknown key "${key}" (allowed: ${[...METER_ENTRY_KEYS].join(', ')})`)
    }
    const name = entry.name
    if (typeof name !== 'string' || !METER_NAME.test(name))
      fail(`${where}.name must match ${METER_NAME.source} (a lower-case letter, then up to 31 of a-z 0-9 _)`)
    if (name === 'requests') fail(`${where}.name may not be requests: that meter is the route's cost`)
    const header = typeof entry.header === 'string' ? entry.header.toLowerCase() : ''
    if (!HEADER_NAME.test(header)) fail(`${where}.header must be a header name such as X-Tokens-Used`)
    if (ANSWER_FRAMING.has(header)) fail(`${where}.header may not be ${header}: the gateway needs it as it is`)
    // A header object's own prototype would read as a header present on every answer.
    if (header in Object.prototype) fail(`${where}.header may not be ${header}`)
    if (entry.expose !== undefined && typeof entry.expose !== 'boolean') fail(`${where}.expose must be true or false`)
    for (const earlier of meters) {
      if (earlier.name === name) fail(`${where}.name duplicates meter ${name}`)
      if (earlier.header === header) fail(`${where}.header is meter ${earlier.name}'s already`)
    }
    meters.push(Object.freeze({ name, header, expose: entry.expose === true }))
  })
  return Object.freeze(meters)
}
