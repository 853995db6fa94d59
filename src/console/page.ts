// The console's one HTML page: a shell that links the hashed script and stylesheet, so that the
// browser fetches both at once, and nothing inline (the Content-Security-Policy allows none).
import type { ConsoleAssets } from './assets.js'
import { CONSOLE_ASSETS } from './paths.js'

export function consolePage(assets: ConsoleAssets): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tenancy-gateway console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${CONSOLE_ASSETS}/${assets.style.name}">
<script type="module" src="${CONSOLE_ASSETS}/${assets.script.name}"></script>
</head>
<body>
<div id="app"><p class="boot">Loading the console…</p></div>
<noscript><p>The console needs JavaScript.</p></noscript>
</body>
</html>
`
}
