// The usage export's push settings (docs/billing.md, Pushing the export): where the closed periods'
// records go, and the secret they are signed with. Both or neither; refused at start with the rule.
import { isIP } from 'node:net'
import { ConfigError } from './config-readers.js'

type Env = Readonly<Record<string, string | undefined>>

export interface UsageExportTarget {
  readonly url: string
  /** `whsec_` + base64 of 24–64 bytes. */
  readonly secret: string
}

/** A loopback host: the one place an export may go over plain http (a test's receiver). */
function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '')
  if (host === 'localhost') return true
  if (isIP(host) === 4) return host.startsWith('127.')
  return host === '::1'
}

export function parseUsageExport(env: Env): UsageExportTarget | null {
  const rawUrl = env.USAGE_EXPORT_URL?.trim() || undefined
  const rawSecret = env.USAGE_EXPORT_SECRET?.trim() || undefined
  if (rawUrl === undefined && rawSecret === undefined) return null
  if (rawUrl === undefined)
    throw new ConfigError('USAGE_EXPORT_URL', 'is required with USAGE_EXPORT_SECRET: where the usage records go')
  if (rawSecret === undefined)
    throw new ConfigError(
      'USAGE_EXPORT_SECRET',
      'is required with USAGE_EXPORT_URL: whsec_ followed by base64 of 24 to 64 random bytes (the receiver verifies it)',
    )
  let url: URL
  try {
    url = new URL(rawUrl)
  } catch {
    throw new ConfigError('USAGE_EXPORT_URL', 'is not a valid URL')
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopback(url.hostname)))
    throw new ConfigError('USAGE_EXPORT_URL', 'must use https:// (http:// only to a loopback address, for tests)')
  if (url.username !== '' || url.password !== '')
    throw new ConfigError(
      'USAGE_EXPORT_URL',
      'must not carry a user or password: the records are signed with USAGE_EXPORT_SECRET',
    )
  const encoded = rawSecret.startsWith('whsec_') ? rawSecret.slice('whsec_'.length) : null
  const bytes =
    encoded !== null && /^[A-Za-z0-9+/]+={0,2}$/.test(encoded) && encoded.length % 4 === 0
      ? Buffer.from(encoded, 'base64').length
      : 0
  if (bytes < 24 || bytes > 64)
    throw new ConfigError('USAGE_EXPORT_SECRET', 'must be whsec_ followed by base64 of 24 to 64 random bytes')
  return { url: url.href, secret: rawSecret }
}
