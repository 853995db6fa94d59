// Where the console lives (docs/console.md): its page, and its assets below it.
export const CONSOLE_PREFIX = '/console'
export const CONSOLE_ASSETS = `${CONSOLE_PREFIX}/assets`
