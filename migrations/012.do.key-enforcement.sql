-- Per quota, like the plan and limits. enforce_limits false is shadow mode: a request past the
-- limits is served and counted as a would-be refusal, never refused or banned. concurrency is the
-- key's own limit of requests in flight; NULL takes its plan's (RATE_LIMIT_CONCURRENCY).
ALTER TABLE api_keys ADD COLUMN enforce_limits boolean NOT NULL DEFAULT true;
ALTER TABLE api_keys ADD COLUMN concurrency integer CHECK (concurrency BETWEEN 1 AND 100000);
