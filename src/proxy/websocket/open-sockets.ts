// The sockets open on this replica (docs/architecture.md, WebSockets): counted per route for the
// metrics and per route and tenant for `max_websockets_per_tenant`, and found by the key that
// opened them and by the tenants they act for, so that an invalidation closes the right ones.

/** What the registry needs of an open socket. */
export interface TrackedSocket {
  readonly route: string
  readonly keyId: string | null
  /** The tenant the socket acts as, and the tenant that owns its key (the same for a sub-account's key). */
  readonly tenantIds: readonly string[]
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
  /** Places held by route and resolved tenant: sockets open and upgrades under way. */
  private readonly places = new Map<string, number>()
  private readonly byKey = new Map<string, Set<S>>()
  private readonly byTenant = new Map<string, Set<S>>()

  /** Takes one of the tenant's places on the route; false when it holds `max` already. */
  reserve(route: string, tenantId: string, max: number): boolean {
    const name = `${route} ${tenantId}`
    const held = this.places.get(name) ?? 0
    if (held >= max) return false
    this.places.set(name, held + 1)
    return true
  }

  /** Gives a place back: an upgrade that did not open, or a socket that closed. */
  unreserve(route: string, tenantId: string): void {
    const name = `${route} ${tenantId}`
    const held = this.places.get(name) ?? 0
    if (held <= 1) this.places.delete(name)
    else this.places.set(name, held - 1)
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

  all(): Iterable<S> {
    return this.sockets
  }
}
