-- ttdb schema v8: per workload, in id order, the records that were measured (error_no 0)
-- but can never be chosen (their costs are not plausible times): what `match` names when a
-- workload has no valid record. Without it PostgreSQL answered "the first three of this
-- workload" by walking the primary key through every record (0.6-0.9 s a workload at 1M
-- records); both engines now read the few entries of the workload.
CREATE INDEX records_unrankable ON records(workload_id, id) WHERE mean_cost IS NULL AND error_no = 0;
