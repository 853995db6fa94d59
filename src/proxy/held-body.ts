// A request body's copy, held so that a retry can send it again (docs/configuration.md, routes:
// `retries.buffer_bytes`). The chunks are the ones streaming to the upstream (no copy is made);
// once the body passes the limit, or the answer begins, they are let go.

declare module 'fastify' {
  interface FastifyRequest {
    /** Its body's chunks while it may still be sent again; null without a body or past the limit. */
    heldBody: HeldBody | null
  }
}

export class HeldBody {
  private chunks: Buffer[] | null = []
  private bytes = 0
  /** Every byte of the body came, and every one is held. */
  private whole = false
  private readonly limit: number
  /** `limit`: the most bytes held (the route's retries.buffer_bytes). */
  constructor(limit: number) {
    this.limit = limit
  }

  /** A chunk of the body on its way upstream. */
  hold(chunk: Buffer): void {
    const chunks = this.chunks
    if (chunks === null) return
    this.bytes += chunk.length
    if (this.bytes > this.limit) this.release()
    else chunks.push(chunk)
  }

  /** The body ended: held whole, unless it passed the limit. */
  ended(): void {
    if (this.chunks !== null) this.whole = true
  }

  /** The body to send again; null when it is not held whole (still coming, or too long). */
  replay(): Buffer | null {
    return this.whole && this.chunks !== null ? Buffer.concat(this.chunks, this.bytes) : null
  }

  /** No retry can come any more (the answer began, or the body is too long): the chunks go. */
  release(): void {
    this.chunks = null
    this.whole = false
  }
}
