-- A sub-account's grants, voided ones included, by sub-account and meter: read with the
-- sub-account on each cache miss (store/credit-grants.ts, GRANTS_OF_TENANT: what the voided and
-- expired ones gave counts in its balance), which the burn order's index, of live grants only,
-- cannot serve. Without it every lookup read the whole table (0.47 s at 200,000 grants).
-- Built in the migration's transaction (not concurrently): writes to credit_grants wait for it.
create index credit_grants_sub_account on credit_grants (sub_account_id, meter);
