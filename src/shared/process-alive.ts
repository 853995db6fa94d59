// Whether a process id names a live process on this machine: signal 0 is delivered to nobody, and
// EPERM means the process lives under another user.

export function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
