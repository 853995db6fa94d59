// The part of the `ws` package (a dependency of @fastify/http-proxy) the gateway, its tests and its
// bench use, until @types/ws is a devDependency (then this file goes).
declare module 'ws' {
  import type { EventEmitter } from 'node:events'
  import type { ClientRequest, IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, Server } from 'node:http'
  import type { Duplex } from 'node:stream'

  export type RawData = Buffer | ArrayBuffer | Buffer[]

  export interface ClientOptions {
    headers?: OutgoingHttpHeaders
    maxPayload?: number
    perMessageDeflate?: boolean
    autoPong?: boolean
    handshakeTimeout?: number
    followRedirects?: boolean
    rejectUnauthorized?: boolean
    skipUTF8Validation?: boolean
    allowSynchronousEvents?: boolean
  }

  export class WebSocket extends EventEmitter {
    static readonly CONNECTING: 0
    static readonly OPEN: 1
    static readonly CLOSING: 2
    static readonly CLOSED: 3
    readonly CONNECTING: 0
    readonly OPEN: 1
    readonly CLOSING: 2
    readonly CLOSED: 3
    constructor(address: string | URL, protocols?: string | string[], options?: ClientOptions)
    readonly readyState: 0 | 1 | 2 | 3
    readonly protocol: string
    readonly bufferedAmount: number
    send(data: unknown, options?: { binary?: boolean }, cb?: (err?: Error) => void): void
    send(data: unknown, cb?: (err?: Error) => void): void
    ping(data?: unknown): void
    pong(data?: unknown): void
    close(code?: number, reason?: string | Buffer): void
    terminate(): void
    pause(): void
    resume(): void
    on(event: 'message', listener: (data: RawData, isBinary: boolean) => void): this
    on(event: 'close', listener: (code: number, reason: Buffer) => void): this
    on(event: 'error', listener: (err: Error & { code?: string }) => void): this
    on(event: 'ping' | 'pong', listener: (data: Buffer) => void): this
    on(event: 'open', listener: () => void): this
    on(event: 'upgrade', listener: (response: IncomingMessage) => void): this
    on(event: 'unexpected-response', listener: (request: ClientRequest, response: IncomingMessage) => void): this
    once(event: 'message', listener: (data: RawData, isBinary: boolean) => void): this
    once(event: 'close', listener: (code: number, reason: Buffer) => void): this
    once(event: 'error', listener: (err: Error & { code?: string }) => void): this
    once(event: 'open', listener: () => void): this
    once(event: 'upgrade', listener: (response: IncomingMessage) => void): this
    once(event: 'unexpected-response', listener: (request: ClientRequest, response: IncomingMessage) => void): this
    off(event: string, listener: (...args: never[]) => void): this
  }

  export interface ServerOptions {
    port?: number
    host?: string
    server?: Server
    noServer?: boolean
    maxPayload?: number
    perMessageDeflate?: boolean
    autoPong?: boolean
    clientTracking?: boolean
    handleProtocols?: (protocols: Set<string>, request: IncomingMessage) => string | false
  }

  export class WebSocketServer extends EventEmitter {
    constructor(options: ServerOptions, callback?: () => void)
    readonly clients: Set<WebSocket>
    address(): { port: number; address: string; family: string } | string
    handleUpgrade(
      request: IncomingMessage,
      socket: Duplex,
      head: Buffer,
      callback: (client: WebSocket, request: IncomingMessage) => void,
    ): void
    close(callback?: (err?: Error) => void): void
    on(event: 'connection', listener: (socket: WebSocket, request: IncomingMessage) => void): this
    on(event: 'headers', listener: (headers: string[], request: IncomingMessage) => void): this
    on(event: 'listening' | 'close', listener: () => void): this
    on(event: 'error', listener: (err: Error) => void): this
  }

  export type { IncomingHttpHeaders }
  export default WebSocket
}
