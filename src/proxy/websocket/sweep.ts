// No race escapes revocation (docs/api.md, WebSockets): once a second, while any socket is open,
// one timer per replica checks every open socket's credentials again through the caches, besides
// the invalidation messages (revocation.ts). A message that came while a socket was still opening
// (before it was registered), or that was lost, is caught here: the cache's entry was evicted by
// the message (or expires within the in-process TTL), so the check reads what the store holds.
// Each key and each tenant is looked up once per sweep, whatever the number of sockets it has: an
// in-process hit, except once per TTL.
import type { FastifyBaseLogger } from 'fastify'
import type { OpenSockets } from './open-sockets.js'
import { type CredentialSources, keyEnded, tenantEnded, tokenWithdrawn } from './revocation.js'
import { ENDINGS, type Ending, type SocketPair } from './socket-pair.js'

export const SWEEP_INTERVAL_MS = 1_000

export class CredentialSweep {
  private timer: NodeJS.Timeout | null = null
  /** The sweep under way: a slow store never stacks one sweep on another. */
  private running: Promise<void> | null = null
  /** The last sweep could not reach the store: warned once, not every second. */
  private failing = false
  private stopped = false

  private readonly sockets: OpenSockets<SocketPair>
  private readonly sources: CredentialSources
  private readonly log: FastifyBaseLogger
  private readonly intervalMs
  constructor(
    sockets: OpenSockets<SocketPair>,
    sources: CredentialSources,
    log: FastifyBaseLogger,
    intervalMs = SWEEP_INTERVAL_MS,
  ) {
    this.sockets = sockets
    this.sources = sources
    this.log = log
    this.intervalMs = intervalMs
  }

  /** A socket opened: the timer runs while any is open, and stops itself when none is. */
  wake(): void {
    if (this.timer !== null || this.stopped) return
    this.timer = setInterval(() => {
      if (this.sockets.size === 0) this.idle()
      else if (this.running === null)
        this.running = this.sweep()
          // A throw past the lookups (closing a socket, arming its expiry) must not end the process.
          .catch((err: unknown) => this.log.error({ err }, 'checking the open WebSockets failed'))
          .finally(() => {
            this.running = null
          })
    }, this.intervalMs)
    this.timer.unref()
  }

  /** Shutdown: no more sweeps. */
  stop(): void {
    this.stopped = true
    this.idle()
  }

  private idle(): void {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
  }

  /** Every open socket checked once: keys first, then tenants, as one socket's check (revocation.ts). */
  async sweep(): Promise<void> {
    this.closeWithdrawnTokens()
    let failures = 0
    const failed = (err: unknown) => {
      if (failures++ === 0 && !this.failing)
        this.log.warn({ err }, 'could not check the open WebSockets against the store; they stay open meanwhile')
    }
    const { lookups } = this.sources
    await Promise.all(
      [...this.sockets.keyIds()].map((keyId) =>
        lookups.keyById(keyId).then((key) => {
          if (keyEnded(key)) this.endAll(this.sockets.withKey(keyId), ENDINGS.revoked)
          else for (const pair of this.sockets.withKey(keyId)) pair.scheduleExpiry(key.expiresAt ?? null)
        }, failed),
      ),
    )
    await Promise.all(
      [...this.sockets.tenantIdsOpen()].map((tenantId) =>
        lookups.tenant(tenantId).then((tenant) => {
          if (tenantEnded(tenant)) this.endAll(this.sockets.withTenant(tenantId), ENDINGS.deactivated)
        }, failed),
      ),
    )
    this.failing = failures > 0
  }

  /** The sockets opened with a token whose signing key was withdrawn (a rotation with `--compromised`). */
  closeWithdrawnTokens(): void {
    for (const pair of this.sockets.all()) if (tokenWithdrawn(pair, this.sources)) pair.end(ENDINGS.revoked)
  }

  private endAll(pairs: Iterable<SocketPair>, ending: Ending): void {
    for (const pair of [...pairs]) pair.end(ending)
  }
}
