// The caller's address against its key's allow-list and its sub-account's (guardrails/): a 403
// right after the key is known, on every proxied route that takes a key, WebSocket upgrades too.
import { ipRefusal } from '../../guardrails/caller-address.js'
import type { StepFactory } from '../options.js'

export const ipAllowlistStep: StepFactory = (route) => {
  if (route.public) return null
  return {
    name: 'ip allow-list',
    check(request) {
      const principal = request.principal!
      // Most keys have no allow-list: two reads, and on.
      if (principal.key.ipAllowlist == null && principal.tenant.keyIpAllowlist == null) return undefined
      return ipRefusal(principal.key, principal.tenant, request.ip)
    },
  }
}
