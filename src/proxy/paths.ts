// Paths no route may take: the gateway's own, in every spelling a folding upstream would read
// as one of them (prefix-shadow.ts).
import {
  CONSOLE_PREFIX,
  CREDENTIAL_PATHS,
  MANAGEMENT_PREFIX,
  PORTAL_PREFIX,
  SECRET_SCANNING_GITHUB_PATH,
} from '../shared/paths.js'
import { FoldedPrefixes } from './prefix-shadow.js'

/**
 * Paths the gateway answers itself: never proxied, and no route may take them
 * (docs/configuration.md, docs/operations.md).
 */
export const RESERVED_PREFIXES = [
  MANAGEMENT_PREFIX,
  '/healthz',
  '/readyz',
  '/openapi.json',
  '/docs',
  ...CREDENTIAL_PATHS,
  SECRET_SCANNING_GITHUB_PATH,
] as const

const RESERVED = new FoldedPrefixes(RESERVED_PREFIXES)
// With the console on (CONSOLE=on, the default), its path and the portal's are the gateway's too; off, they are any path.
// The sub-account portal is served with the console (portal/plugin.ts).
const RESERVED_WITH_CONSOLE = new FoldedPrefixes([...RESERVED_PREFIXES, CONSOLE_PREFIX, PORTAL_PREFIX])

/**
 * True for a reserved prefix and anything below it, compared as a folding upstream would read it
 * (decoded, case-insensitively, trailing dots and spaces of a segment dropped: prefix-shadow.ts),
 * so that no spelling of a management, health or docs path reaches an upstream (a catch-all route
 * would otherwise take `POST /healthz`, `/docs/x` or `/v1/sub-accounts./x`).
 */
export function isReservedPath(path: string, consoleServed = false): boolean {
  return (consoleServed ? RESERVED_WITH_CONSOLE : RESERVED).covers(path)
}
