-- ttdb schema v9: pinned layout plans (docs/design/layout-plan.md). A plan decides every
-- NCHWc conv's blocking, and so the workload keys of a model's kernels: it is chosen once
-- per model structure and host class, then every command (tune, apply, run, match, export)
-- reads the same one until the user asks for a re-plan.
CREATE TABLE layout_plans (
    model_key   TEXT NOT NULL,   -- sha256 of the model's op graph and extraction options
    host_class  TEXT NOT NULL,   -- HostFingerprint::class of the machine it was planned for
    model       TEXT NOT NULL,   -- the model's name when pinned (shown, not matched)
    plan_json   TEXT NOT NULL,   -- the LayoutPlan: blocking per conv node, costs, counts
    pinned_at   TEXT NOT NULL,
    PRIMARY KEY (model_key, host_class)
);
