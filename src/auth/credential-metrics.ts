// The credentials' metrics (docs/operations.md): signatures made and tokens verified, fed as plain
// numbers on the request path. Once warm, a repeated token or assertion costs neither.
import { Gauge, type Registry } from 'prom-client'
import { talliedCounter, type Tally } from '../shared/fast-metrics.js'

export interface CredentialMetrics {
  /** Signatures made: access tokens issued, identity assertions signed. */
  readonly signatures: { readonly accessToken: Tally; readonly identity: Tally }
  /** Signature checks of access tokens (a remembered token costs none), by outcome. */
  readonly tokenVerifications: { readonly valid: Tally; readonly invalid: Tally }
  /** How many identity assertions the cache holds now; set by their holder (identity/assertions.ts). */
  identityAssertionsHeld: () => number
}

export function credentialMetrics(registers: Registry[]): CredentialMetrics {
  const [accessToken, identity] = talliedCounter(
    {
      name: 'tgw_signatures_total',
      help: 'Signatures made, by what was signed (access_token, identity)',
      labelNames: ['purpose'] as const,
      registers,
    },
    [{ purpose: 'access_token' }, { purpose: 'identity' }],
  )
  const [valid, invalid] = talliedCounter(
    {
      name: 'tgw_token_verifications_total',
      help: 'Signature checks of access tokens, by outcome (valid, invalid); a remembered token is not checked again',
      labelNames: ['outcome'] as const,
      registers,
    },
    [{ outcome: 'valid' }, { outcome: 'invalid' }],
  )
  const credentials: CredentialMetrics = {
    signatures: { accessToken: accessToken!, identity: identity! },
    tokenVerifications: { valid: valid!, invalid: invalid! },
    identityAssertionsHeld: () => 0,
  }
  new Gauge({
    name: 'tgw_identity_assertions_cached',
    help: 'Signed identity assertions held for reuse by this replica (dropped with their key or tenant, and at a rotation)',
    registers,
    collect() {
      this.set(credentials.identityAssertionsHeld())
    },
  })
  return credentials
}
