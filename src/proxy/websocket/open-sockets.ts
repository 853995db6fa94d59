// The sockets open on this replica (docs/internals.md, WebSockets): counted per route for the
// metrics, per route and tenant for `max_websockets_per_tenant` and per route and parent account
// for `max_websockets_per_account`, and found by the key that opened them and by the tenants they
// act for, so that an invalidation (or the sweep, sweep.ts) closes the right ones.

/** What the registry needs of an open socket. */
export interface TrackedSocket {
  readonly route: string
  readonly keyId: string | null
  /** The tenant the socket acts as, and the tenant that owns its key (the same for a sub-account's key). */
  readonly tenantIds: readonly string[]
}

/** Whose places an upgrade takes: the tenant it acts as, and the parent account its key belongs to. */
export interface SocketHolder {
  readonly tenantId: string
  readonly accountId: string
}

/** Which cap refused a place. */
export type PlaceRefusal = 'tenant' | 'account'

/** Counts per route and id, each up to a bound given at each take. */
class Places {
  private readonly held = new Map<string, number>()

  take(route: string, id: string, max: number): boolean {
    const name = `${route} ${id}`
    const held = this.held.get(name) ?? 0
    if (held >= max) return false
    this.held.set(name, held + 1)
    return true
  }

  giveBack(route: string, id: string): void {
    const name = `${route} ${id}`
    const held = this.held.get(name) ?? 0
    if (held <= 1) this.held.delete(name)
    else this.held.set(name, held - 1)
  }
}

function add<K, V>(index: Map<K, Set<V>>, key: K, value: V): void {
  const set = index.get(key)
  if (set === undefined) index.set(key, new Set([value]))
  else set.add(value)
}

function remove<K, V>(index: Map<K, Set<V>>, key: K, value: V): void {
  const set = index.get(key)
  if (set === undefined) return
  set.delete(value)
  if (set.size === 0) index.delete(key)
}

export class OpenSockets<S extends TrackedSocket> {
  private readonly sockets = new Set<S>()
  /** Open sockets by route prefix (the gauge). */
  private readonly perRoute = new Map<string, number>()
  /** Places held by route and resolved tenant, and by route and parent account: sockets open and upgrades under way. */
  private readonly tenantPlaces = new Places()
  private readonly accountPlaces = new Places()
  private readonly byKey = new Map<string, Set<S>>()
  private readonly byTenant = new Map<string, Set<S>>()

  /**
   * Takes one of the tenant's places on the route and one of its parent account's, or neither:
   * null when both were free, else the cap that is full.
   */
  reserve(route: string, holder: SocketHolder, maxPerTenant: number, maxPerAccount: number): PlaceRefusal | null {
    if (!this.tenantPlaces.take(route, holder.tenantId, maxPerTenant)) return 'tenant'
    if (!this.accountPlaces.take(route, holder.accountId, maxPerAccount)) {
      this.tenantPlaces.giveBack(route, holder.tenantId)
      return 'account'
    }
    return null
  }

  /** Gives the places back: an upgrade that did not open, or a socket that closed. */
  unreserve(route: string, holder: SocketHolder): void {
    this.tenantPlaces.giveBack(route, holder.tenantId)
    this.accountPlaces.giveBack(route, holder.accountId)
  }

  /** A socket is open (its place, if it has one, was reserved by its upgrade). */
  opened(socket: S): void {
    this.sockets.add(socket)
    this.perRoute.set(socket.route, (this.perRoute.get(socket.route) ?? 0) + 1)
    if (socket.keyId !== null) add(this.byKey, socket.keyId, socket)
    for (const tenantId of socket.tenantIds) add(this.byTenant, tenantId, socket)
  }

  closed(socket: S): void {
    if (!this.sockets.delete(socket)) return
    this.perRoute.set(socket.route, (this.perRoute.get(socket.route) ?? 1) - 1)
    if (socket.keyId !== null) remove(this.byKey, socket.keyId, socket)
    for (const tenantId of socket.tenantIds) remove(this.byTenant, tenantId, socket)
  }

  openOn(route: string): number {
    return this.perRoute.get(route) ?? 0
  }

  has(socket: S): boolean {
    return this.sockets.has(socket)
  }

  get size(): number {
    return this.sockets.size
  }

  withKey(keyId: string): Iterable<S> {
    return this.byKey.get(keyId) ?? []
  }

  withTenant(tenantId: string): Iterable<S> {
    return this.byTenant.get(tenantId) ?? []
  }

  /** The keys that opened the sockets open now, each once. */
  keyIds(): Iterable<string> {
    return this.byKey.keys()
  }

  /** The tenants the sockets open now act for or whose keys opened them, each once. */
  tenantIdsOpen(): Iterable<string> {
    return this.byTenant.keys()
  }

  all(): Iterable<S> {
    return this.sockets
  }
}
