// An OTLP/HTTP collector that takes every export and keeps nothing: the traced gateways' endpoint
// in bench:proxy and bench:trace-instructions, in the bench's own process (not under valgrind).
import { createServer, type Server as HttpServer } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Sink {
  url: string
  /** Exports taken so far. */
  exports(): number
  close(): Promise<void>
}

export async function startSink(): Promise<Sink> {
  let exports = 0
  const server: HttpServer = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      exports++
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    exports: () => exports,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
