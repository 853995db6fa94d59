// esbuild bundles imported stylesheets into console.css; to TypeScript they are side effects only.
declare module '*.css'
