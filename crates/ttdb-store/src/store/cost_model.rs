//! Storage of the search's learned cost model per host class. The bytes are opaque here:
//! the search module encodes them and validates them when it reads them back.
use super::db::params;
use super::{Result, Store};

/// A stored model: its bytes and how many measured programs it was trained on.
#[derive(Clone, Debug)]
pub struct StoredCostModel {
    pub bytes: Vec<u8>,
    pub programs: i64,
    pub updated_at: String,
}

impl Store {
    pub fn cost_model(&self, host_class: &str) -> Result<Option<StoredCostModel>> {
        self.db.query_opt(
            "SELECT model, programs, updated_at FROM cost_models WHERE host_class = ?1",
            params![host_class],
            |r| {
                Ok(StoredCostModel {
                    bytes: r.get(0)?,
                    programs: r.get(1)?,
                    updated_at: r.get(2)?,
                })
            },
        )
    }

    /// Replaces the model of `host_class` (one statement: the old one or the new one, never
    /// a mix, so repeating it after a lost connection is safe).
    pub fn save_cost_model(&self, host_class: &str, bytes: &[u8], programs: i64) -> Result<()> {
        let when = super::now_rfc3339();
        self.db.retrying(|db| {
            db.execute(
                "INSERT INTO cost_models (host_class, model, programs, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (host_class) DO UPDATE SET model = excluded.model,
                     programs = excluded.programs, updated_at = excluded.updated_at",
                params![host_class, bytes, programs, when],
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    crate::on_both_backends! {
        fn saves_replaces_and_reads_back_per_host_class(backend) {
        let s = backend.store();
        assert!(s.cost_model("znver4-16-2").unwrap().is_none());
        s.save_cost_model("znver4-16-2", b"one", 10).unwrap();
        s.save_cost_model("znver4-16-2", b"two", 20).unwrap();
        s.save_cost_model("znver3-8-2", b"other", 5).unwrap();
        let m = s.cost_model("znver4-16-2").unwrap().unwrap();
        assert_eq!((m.bytes.as_slice(), m.programs), (&b"two"[..], 20));
        assert_eq!(s.cost_model("znver3-8-2").unwrap().unwrap().bytes, b"other");
        }
    }
}
