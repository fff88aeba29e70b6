-- Reads one recurring schedule with the clock of the node that holds it, so
-- that its next run is computed from the same time the run script checks.
--
-- KEYS[1] the schedule's HASH
-- Returns { now ms, { spec, version, next ms, last ms, runs } } (fields nil
-- when the schedule does not exist)

return { now_ms(), redis.call('HMGET', KEYS[1], 'spec', 'v', 'next', 'last', 'runs') }
