// Which Redis master the gateway's commands go to, and when that changed (a Sentinel failover, a
// cluster master replaced by its replica): for /readyz and the metrics (docs/operations.md).
import { Cluster } from './ioredis.js'
import type { CacheMetrics } from './metrics.js'
import type { RedisClient } from './redis-topology.js'

export interface RedisMasters {
  /** host:port of each master in use now (sorted; empty while not connected). */
  masters: string[]
  /** Changes of master seen since the start. */
  changes: number
  /** When the last change was seen (ISO 8601), null if none. */
  lastChangeAt: string | null
}

export class MasterWatch {
  private current: string[] = []
  /** The last non-empty set: a reconnection to the same master is no change. */
  private known: string[] = []
  private changes = 0
  private lastChangeAt: string | null = null

  private readonly redis: RedisClient
  private readonly metrics: Pick<CacheMetrics, 'redisMaster' | 'redisMasterChanges'>
  /** Told of each change, as it is seen: the new master may lack writes the old one took. */
  private readonly changed: () => void
  constructor(
    redis: RedisClient,
    metrics: Pick<CacheMetrics, 'redisMaster' | 'redisMasterChanges'>,
    changed: () => void = () => {},
  ) {
    this.redis = redis
    this.metrics = metrics
    this.changed = changed
    const look = () => this.look()
    redis.on('ready', look)
    redis.on('close', () => this.update([]))
    // A cluster client learns of a new master when it asks for the slots again.
    if (redis instanceof Cluster) redis.on('refresh', look)
  }

  private look(): void {
    if (this.redis instanceof Cluster) {
      this.update(this.redis.nodes('master').map((node) => `${node.options.host}:${node.options.port}`))
      return
    }
    const stream = (this.redis as { stream?: { remoteAddress?: string; remotePort?: number } }).stream
    if (stream?.remoteAddress !== undefined) this.update([`${stream.remoteAddress}:${stream.remotePort}`])
  }

  private update(masters: string[]): void {
    const sorted = [...masters].sort()
    if (sorted.join() === this.current.join()) return
    for (const address of this.current) this.metrics.redisMaster.remove(address)
    for (const address of sorted) this.metrics.redisMaster.set({ address }, 1)
    this.current = sorted
    if (sorted.length === 0) return
    if (this.known.length > 0 && sorted.join() !== this.known.join()) {
      this.changes++
      this.lastChangeAt = new Date().toISOString()
      this.metrics.redisMasterChanges.inc()
      this.changed()
    }
    this.known = sorted
  }

  get state(): RedisMasters {
    return { masters: [...this.current], changes: this.changes, lastChangeAt: this.lastChangeAt }
  }
}
