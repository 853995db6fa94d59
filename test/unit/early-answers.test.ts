// A write to an upstream that reset or closed stops the body without failing the socket
// (src/proxy/early-answers.ts): ECONNRESET and EPIPE are held, the socket destroyed with the
// first once its read side ends; any other write error is reported as before.
import { Socket } from 'node:net'
import t from 'tap'
import { readPastWriteErrors } from '../../src/proxy/early-answers.js'

/** A socket whose writes fail with `code`, never connected. */
function failingSocket(code: string): Socket {
  const socket = new Socket()
  const fail = (callback: (error?: Error | null) => void) =>
    callback(Object.assign(new Error(`write ${code}`), { code, syscall: 'write' }))
  const raw = socket as unknown as {
    _write: (c: unknown, e: string, cb: (error?: Error | null) => void) => void
    _writev: (c: unknown[], cb: (error?: Error | null) => void) => void
  }
  raw._write = (_chunk, _encoding, callback) => fail(callback)
  raw._writev = (_chunks, callback) => fail(callback)
  return socket
}

t.test('a write the peer reset is held until the read side ends', async (t) => {
  for (const code of ['ECONNRESET', 'EPIPE']) {
    const socket = failingSocket(code)
    readPastWriteErrors(socket)
    const errors: Error[] = []
    socket.on('error', (err) => errors.push(err))
    socket.write('a')
    socket.cork()
    socket.write('b')
    socket.write('c')
    socket.uncork()
    await new Promise((resolve) => setImmediate(resolve))
    t.notOk(socket.destroyed, `${code}: not destroyed while it may still read`)
    t.same(errors, [], `${code}: no error reported`)
    const closed = new Promise((resolve) => socket.once('close', resolve))
    socket.emit('end')
    await closed
    t.equal((errors[0] as NodeJS.ErrnoException | undefined)?.code, code, `${code}: the read side's end gives it`)
  }
})

t.test('any other write error is reported at once', async (t) => {
  const socket = failingSocket('EACCES')
  readPastWriteErrors(socket)
  const failed = new Promise<Error>((resolve) => socket.once('error', resolve))
  socket.write('a')
  t.equal(((await failed) as NodeJS.ErrnoException).code, 'EACCES')
})
