-- ttdb schema v3: records by workload and target, failed ones included (the best-record
-- index holds valid records only). Lets the matcher explain a miss ("only failed
-- measurements", "only on another target") without scanning every record of a class.
CREATE INDEX records_workload_target ON records(workload_id, target_id);
