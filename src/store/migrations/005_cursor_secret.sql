-- A secret shared by every replica of a deployment, made once by Postgres itself: paging cursors
-- carry an HMAC under it (docs/decisions/0042-cursors-are-signed-with-a-secret-postgres-keeps.md),
-- so the API accepts only cursors it issued, whichever replica issued them. 32 bytes from two v4
-- UUIDs: 244 bits from gen_random_uuid(), which draws on the server's cryptographically strong
-- random source (core since PostgreSQL 13, and in PGlite, without pgcrypto).
create table if not exists gateway_secrets (
  name  text primary key,
  value bytea not null check (octet_length(value) >= 32)
);

insert into gateway_secrets (name, value)
values ('cursor', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()))
on conflict (name) do nothing;
