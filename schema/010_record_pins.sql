-- ttdb schema v10: schedules chosen inside a model (docs/design/run.md). `tune MODEL` times
-- each kernel's few best records inside the model and pins the fastest there, per host
-- class: tuned costs are timed alone and warm, and rank near-equal schedules in an order a
-- model does not keep. A pin holds while the best record by cost is still the one it was
-- chosen over (`over_record_id`): a faster record found later supersedes it.
CREATE TABLE record_pins (
    workload_id    BIGINT  NOT NULL REFERENCES workloads(id),
    host_class     TEXT    NOT NULL,
    record_id      BIGINT  NOT NULL REFERENCES records(id),  -- the record chosen
    over_record_id BIGINT  NOT NULL REFERENCES records(id),  -- the best by cost then
    model          TEXT    NOT NULL,   -- the model it was timed in (shown, not matched)
    model_ms       DOUBLE PRECISION NOT NULL,  -- its time there, per call
    pinned_at      TEXT    NOT NULL,
    PRIMARY KEY (workload_id, host_class)
);
