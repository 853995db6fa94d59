// Units as the console and the portal write them (docs/api.md, Units): request units first, then
// each meter an upstream reported, e.g. "10 request units · 900 tokens".
export function unitsText(units: Readonly<Record<string, number>> | undefined): string {
  if (units === undefined) return ''
  const { requests = 0, ...meters } = units
  return [
    `${requests} request unit${requests === 1 ? '' : 's'}`,
    ...Object.entries(meters).map(([meter, n]) => `${n} ${meter}`),
  ].join(' · ')
}
