// A body's `limits` as kept (docs/api.md, Limits and quotas): its schema checks the shapes and
// bounds; the meters' names are checked here, with the name in the answer's pointer.
import { validationFailed } from '../errors.js'
import { limitsFromBody, meterLimitsProblem, type TenantLimits } from '../shared/tenant-limits.js'

export function bodyLimits(body: Parameters<typeof limitsFromBody>[0]): TenantLimits | null {
  checkMeters(body?.meters, '/body/limits/meters')
  checkMeters(body?.shadow?.meters, '/body/limits/shadow/meters')
  // Credits are of the same route meters (docs/api.md, Credits).
  checkMeters(body?.credits, '/body/limits/credits')
  return limitsFromBody(body)
}

function checkMeters(meters: { [meter: string]: unknown } | undefined, at: string): void {
  const problem = meterLimitsProblem(meters)
  if (problem === null) return
  const path = problem.meter === null ? at : `${at}/${escapePointer(problem.meter.slice(0, 64))}`
  throw validationFailed([{ path, message: problem.message }])
}

/** A JSON Pointer's reference token (RFC 6901): `~` and `/` escaped. */
function escapePointer(token: string): string {
  return token.replaceAll('~', '~0').replaceAll('/', '~1')
}
