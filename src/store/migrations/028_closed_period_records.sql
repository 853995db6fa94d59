-- A closed period never changes (docs/billing.md, Periods close): its export record keeps the
-- external_id its tenant had when the period closed. The close (store/usage-periods.ts) writes it
-- here, with when; a rename afterwards changes only the periods still open. Null `closed_at`: open
-- (or written as history, without a replica's flush mark), read with the tenant's current one.
alter table usage_period_units
  add column closed_at           timestamptz,
  add column external_id_at_close text;

-- The periods closed before this migration keep the external_id they have now: the earliest that
-- can still be known.
update usage_period_units u
set closed_at = c.closed_at, external_id_at_close = t.external_id
from usage_close c, tenants t
where c.closed_until is not null and u.period_start < c.closed_until and t.id = u.tenant_id;
