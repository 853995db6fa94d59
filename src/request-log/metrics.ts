// The request log's metrics (docs/operations.md): records written, dropped and waiting, and
// failed writes. Dropped records are the sign that Postgres cannot keep up with the traffic.
import { Counter, Gauge, type Registry } from 'prom-client'
import type { RequestLogWriter } from './writer.js'

export interface RequestLogMetrics {
  written(records: number): void
  writeFailed(): void
}

export function requestLogMetrics(registry: Registry, writer: () => RequestLogWriter): RequestLogMetrics {
  const registers = [registry]
  const written = new Counter({
    name: 'tgw_request_log_written_total',
    help: 'Request log records written to Postgres',
    registers,
  })
  const failures = new Counter({
    name: 'tgw_request_log_write_failures_total',
    help: 'Request log batches whose write failed (they are tried again)',
    registers,
  })
  new Counter({
    name: 'tgw_request_log_dropped_total',
    help: 'Request log records dropped, oldest first, because the buffer was full (Postgres fell behind)',
    registers,
    collect() {
      this.reset()
      this.inc(writer().buffer.dropped)
    },
  })
  new Gauge({
    name: 'tgw_request_log_buffered',
    help: 'Request log records waiting to be written',
    registers,
    collect() {
      this.set(writer().buffer.size)
    },
  })
  return { written: (records) => written.inc(records), writeFailed: () => failures.inc() }
}
