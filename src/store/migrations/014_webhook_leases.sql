-- Deliveries under a lease (an attempt under way, or a dead replica's until it runs out): the
-- claim counts them per endpoint, so that one endpoint cannot hold every worker's slots.
create index webhook_deliveries_leased on webhook_deliveries (endpoint_id) where lease_token is not null;
