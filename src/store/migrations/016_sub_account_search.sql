-- The sub-accounts list's `q` (docs/api.md, Sub-accounts): a prefix of the name or of the
-- external_id, case-insensitive, within one parent. `text_pattern_ops` lets a `like 'abc%'` use
-- the index whatever the database's collation; `lower(...)` matches the search's own lower().
-- Built in the migration's transaction (not concurrently): writes to tenants wait for it (both
-- indexes over 100,000 sub-accounts: 0.7 s on the test machine).
create index tenants_parent_lower_name on tenants (parent_id, lower(name) text_pattern_ops)
  where parent_id is not null;
create index tenants_parent_lower_external_id on tenants (parent_id, lower(external_id) text_pattern_ops)
  where parent_id is not null and external_id is not null;
