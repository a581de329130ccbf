//! Pinned layout plans (schema v9): one whole-graph NCHWc blocking per model structure and
//! host class, so that the commands reading a database agree on a model's kernels (and
//! their workload keys) while `tune` adds the records a re-plan would weigh.
use super::db::params;
use super::{now_rfc3339, Result, Store};

/// A plan as stored. `plan_json` is untrusted: the caller parses and checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedPlan {
    pub model: String,
    pub plan_json: String,
    pub pinned_at: String,
}

/// The plan pinned for `model_key` on `host_class`, if any.
pub fn pinned_plan(store: &Store, model_key: &str, host_class: &str) -> Result<Option<PinnedPlan>> {
    store.db.query_opt(
        "SELECT model, plan_json, pinned_at FROM layout_plans WHERE model_key = ?1 AND host_class = ?2",
        params![model_key, host_class],
        |r| {
            Ok(PinnedPlan {
                model: r.get(0)?,
                plan_json: r.get(1)?,
                pinned_at: r.get(2)?,
            })
        },
    )
}

/// Every plan pinned for `model_key`, on any host class, by host class.
pub fn pinned_plans(store: &Store, model_key: &str) -> Result<Vec<(String, PinnedPlan)>> {
    store.db.query_map(
        "SELECT host_class, model, plan_json, pinned_at FROM layout_plans WHERE model_key = ?1 ORDER BY host_class",
        params![model_key],
        |r| {
            Ok((
                r.get(0)?,
                PinnedPlan {
                    model: r.get(1)?,
                    plan_json: r.get(2)?,
                    pinned_at: r.get(3)?,
                },
            ))
        },
    )
}

/// Whether pinning replaces a plan pinned before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Pin unless one is pinned already (another command may have pinned one since this
    /// one looked): the first pin wins, so concurrent commands agree.
    IfAbsent,
    /// Replace what is pinned (a re-plan).
    Replace,
}

/// Pins `plan_json` for `model_key` on `host_class` as `how` says, and returns what is
/// pinned after: this plan, or with [`Pin::IfAbsent`] the one another command pinned first.
pub fn pin_plan(
    store: &Store,
    model_key: &str,
    host_class: &str,
    model: &str,
    plan_json: &str,
    how: Pin,
) -> Result<PinnedPlan> {
    let at = now_rfc3339();
    let conflict = match how {
        Pin::IfAbsent => "DO NOTHING",
        Pin::Replace => {
            "DO UPDATE SET model = excluded.model, plan_json = excluded.plan_json, pinned_at = excluded.pinned_at"
        }
    };
    let insert = format!(
        "INSERT INTO layout_plans (model_key, host_class, model, plan_json, pinned_at)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (model_key, host_class) {conflict}"
    );
    store.db.transaction(|db| {
        db.execute(
            &insert,
            params![model_key, host_class, model, plan_json, at],
        )?;
        Ok(())
    })?;
    pinned_plan(store, model_key, host_class)?.ok_or_else(|| {
        super::StoreError::Other(format!("the layout plan pinned for {model} is gone"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::on_both_backends;

    on_both_backends! {
        fn a_plan_is_pinned_per_model_and_host_class_and_a_replan_replaces_it(backend) {
            let s = backend.store();
            assert_eq!(pinned_plan(&s, "k", "host a").unwrap(), None);
            let first = pin_plan(&s, "k", "host a", "m", "{\"v\":1}", Pin::IfAbsent).unwrap();
            assert_eq!(first.plan_json, "{\"v\":1}");
            pin_plan(&s, "k", "host b", "m", "{\"v\":2}", Pin::IfAbsent).unwrap();
            // The first pin wins: a second command that planned meanwhile gets it back.
            let second = pin_plan(&s, "k", "host a", "m", "{\"v\":9}", Pin::IfAbsent).unwrap();
            assert_eq!(second, first);
            assert_eq!(pinned_plan(&s, "k", "host a").unwrap().unwrap().plan_json, "{\"v\":1}");
            // A re-plan replaces it.
            pin_plan(&s, "k", "host a", "m2", "{\"v\":3}", Pin::Replace).unwrap();
            let p = pinned_plan(&s, "k", "host a").unwrap().unwrap();
            assert_eq!((p.model.as_str(), p.plan_json.as_str()), ("m2", "{\"v\":3}"));
            assert_eq!(pinned_plan(&s, "k", "host b").unwrap().unwrap().plan_json, "{\"v\":2}");
            assert_eq!(pinned_plan(&s, "other", "host a").unwrap(), None);
            let all = pinned_plans(&s, "k").unwrap();
            let classes: Vec<&str> = all.iter().map(|(c, _)| c.as_str()).collect();
            assert_eq!(classes, ["host a", "host b"]);
            assert_eq!(all[0].1, p);
            assert!(pinned_plans(&s, "other").unwrap().is_empty());
        }
    }
}
