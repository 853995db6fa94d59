// The units an upstream reports for one answer (docs/api.md, Units): read from the response
// header of each of the route's meters, or from the trailer of that name at the end of a streamed
// answer, and taken out of what the client gets unless the meter is exposed. A value is read as
// HTTP reads a field value: the spaces and tabs around it are not part of it (RFC 9110 §5.5), so
// `  9  ` reports 9. What is left, if not a whole number from 0 to 10^12, is ignored, counted and
// logged: a bad report never fails an answer.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyBaseLogger } from 'fastify'
import type { ProxyRoute, RouteMeter } from './route.js'

export const MAX_REPORTED_UNITS = 1e12
/** A whole number of at most 13 digits, with optional whitespace (OWS: spaces and tabs) around it. */
const WHOLE_NUMBER = /^[ \t]*([0-9]{1,13})[ \t]*$/

/** Counts a bad report of a route's meter (tgw_meter_bad_reports_total{route, meter}). */
export type BadReportCounter = (route: string, meter: string) => void

/** The reading of one route's meters, built once when the route is registered. */
export class MeterReports {
  private readonly meters: readonly RouteMeter[]
  private readonly route: string
  private readonly badReport: BadReportCounter
  /** The headers the client does not get (headers.ts leaves them out): the meters not exposed. */
  readonly hidden: ReadonlySet<string>
  constructor(route: ProxyRoute, badReport: BadReportCounter) {
    this.meters = route.meters
    this.route = route.prefix
    this.badReport = badReport
    this.hidden = new Set(route.meters.filter((meter) => !meter.expose).map((meter) => meter.header))
  }

  /** The units the answer's headers report, by meter; null when none does. */
  fromHeaders(headers: IncomingHttpHeaders, log: FastifyBaseLogger): Map<string, number> | null {
    let units: Map<string, number> | null = null
    for (const meter of this.meters) {
      const value = headers[meter.header]
      if (value === undefined) continue
      const read = this.read(meter, value, log)
      if (read === null) continue
      units ??= new Map()
      units.set(meter.name, read)
    }
    return units
  }

  /**
   * The units a streamed answer's trailers report, over those of its headers (the trailer is the
   * upstream's last word); the exposed meters' trailers are added to `response`, the others never
   * reach the client.
   */
  fromTrailers(
    trailers: IncomingHttpHeaders,
    units: Map<string, number> | null,
    response: ServerResponse,
    log: FastifyBaseLogger,
  ): Map<string, number> | null {
    for (const meter of this.meters) {
      const value = trailers[meter.header]
      if (value === undefined) continue
      if (meter.expose && typeof value === 'string') response.addTrailers({ [meter.header]: value })
      const read = this.read(meter, value, log)
      if (read === null) continue
      units ??= new Map()
      units.set(meter.name, read)
    }
    return units
  }

  /** A report's units, or null (counted and logged) when it is not a whole number from 0 to 10^12. */
  private read(meter: RouteMeter, value: string | string[], log: FastifyBaseLogger): number | null {
    const digits = typeof value === 'string' ? WHOLE_NUMBER.exec(value)?.[1] : undefined
    if (digits !== undefined) {
      const units = Number(digits)
      if (units <= MAX_REPORTED_UNITS) return units
    }
    this.badReport(this.route, meter.name)
    log.warn(
      { route: this.route, meter: meter.name, header: meter.header, value: String(value).slice(0, 64) },
      'the upstream reported units that are not a whole number from 0 to 10^12: ignored',
    )
    return null
  }
}
