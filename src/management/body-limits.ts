// A body's `limits` as kept (docs/api.md, Limits and quotas): its schema checks the shapes and
// bounds; the meters' names are checked here, with the name in the answer's pointer.
import { validationFailed } from '../errors.js'
import { limitsFromBody, meterLimitsProblem, type TenantLimits } from '../shared/tenant-limits.js'

export function bodyLimits(body: Parameters<typeof limitsFromBody>[0]): TenantLimits | null {
  const problem = meterLimitsProblem(body?.meters)
  if (problem !== null) {
    const path =
      problem.meter === null
        ? '/body/limits/meters'
        : `/body/limits/meters/${escapePointer(problem.meter.slice(0, 64))}`
    throw validationFailed([{ path, message: problem.message }])
  }
  return limitsFromBody(body)
}

/** A JSON Pointer's reference token (RFC 6901): `~` and `/` escaped. */
function escapePointer(token: string): string {
  return token.replaceAll('~', '~0').replaceAll('/', '~1')
}
