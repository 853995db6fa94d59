-- The portal page's frame-ancestors (docs/api.md, Portal sessions): its link carries the session's
-- token in the fragment only, which browsers never send, so the page is allowed in the frame of the
-- origin that its Referer names when some parent lists that origin. This index answers "does any
-- parent list it" for an unauthenticated page without reading every tenant.
create index tenants_portal_origins on tenants using gin (portal_origins)
  where portal_origins is not null;
