//! Records chosen inside a model (schema v10): `tune MODEL` times a kernel's few best records
//! in the model and pins the fastest there for its workload and host class. The pin names
//! the record that was best by cost when it was chosen: once another is, the pin no longer
//! holds (the caller checks, [`RecordPin::holds_over`]).
use super::db::params;
use super::{now_rfc3339, Result, Store};

/// A pin as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordPin {
    pub record_id: i64,
    /// The record that was best by cost when this one was chosen.
    pub over_record_id: i64,
    pub model: String,
    /// The chosen record's time in `model`, per call.
    pub model_ms: f64,
    pub pinned_at: String,
}

impl RecordPin {
    /// Whether the pin still holds when `best` is the workload's best record by cost.
    pub fn holds_over(&self, best: i64) -> bool {
        self.over_record_id == best
    }
}

/// One choice to pin (see [`pin_records`]).
#[derive(Clone, Debug, PartialEq)]
pub struct NewPin {
    pub workload_id: i64,
    pub record_id: i64,
    pub over_record_id: i64,
    pub model_ms: f64,
}

/// The pin of `workload_id` on `host_class`, if any.
pub fn pinned_record(
    store: &Store,
    workload_id: i64,
    host_class: &str,
) -> Result<Option<RecordPin>> {
    store.db.query_opt(
        "SELECT record_id, over_record_id, model, model_ms, pinned_at FROM record_pins
         WHERE workload_id = ?1 AND host_class = ?2",
        params![workload_id, host_class],
        |r| {
            Ok(RecordPin {
                record_id: r.get(0)?,
                over_record_id: r.get(1)?,
                model: r.get(2)?,
                model_ms: r.get(3)?,
                pinned_at: r.get(4)?,
            })
        },
    )
}

/// Pins every choice of `pins`, timed in `model` on `host_class`, in one transaction,
/// replacing earlier pins of the same workloads.
pub fn pin_records(store: &Store, host_class: &str, model: &str, pins: &[NewPin]) -> Result<()> {
    let at = now_rfc3339();
    store.db.transaction(|db| {
        for p in pins {
            db.execute(
                "INSERT INTO record_pins
                   (workload_id, host_class, record_id, over_record_id, model, model_ms, pinned_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (workload_id, host_class) DO UPDATE SET
                   record_id = excluded.record_id, over_record_id = excluded.over_record_id,
                   model = excluded.model, model_ms = excluded.model_ms,
                   pinned_at = excluded.pinned_at",
                params![
                    p.workload_id,
                    host_class,
                    p.record_id,
                    p.over_record_id,
                    model,
                    p.model_ms,
                    at
                ],
            )?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::measurement::store_measurements;
    use crate::store::measurement::tests::{host, item};

    crate::on_both_backends! {
    fn a_pin_is_kept_per_workload_and_host_class_and_replaced_by_the_next(backend) {
        let mut s = backend.store();
        let ids = store_measurements(
            &mut s, "search", &host(), &[item(Some(1e-3)), item(Some(2e-3))],
        ).unwrap();
        let workload: i64 = s.db.query_one(
            "SELECT workload_id FROM records WHERE id = ?1", params![ids[0]], |r| r.get(0),
        ).unwrap();
        assert_eq!(pinned_record(&s, workload, "class a").unwrap(), None);
        let pin = |record_id, ms| NewPin { workload_id: workload, record_id, over_record_id: ids[0], model_ms: ms };
        pin_records(&s, "class a", "m.onnx", &[pin(ids[1], 0.5)]).unwrap();
        let p = pinned_record(&s, workload, "class a").unwrap().expect("pinned");
        assert_eq!((p.record_id, p.over_record_id, p.model.as_str(), p.model_ms), (ids[1], ids[0], "m.onnx", 0.5));
        assert!(p.holds_over(ids[0]) && !p.holds_over(ids[1]));
        assert_eq!(pinned_record(&s, workload, "class b").unwrap(), None);
        pin_records(&s, "class a", "n.onnx", &[pin(ids[0], 0.4)]).unwrap();
        let p = pinned_record(&s, workload, "class a").unwrap().expect("pinned");
        assert_eq!((p.record_id, p.model.as_str()), (ids[0], "n.onnx"));
    }
    }
}
