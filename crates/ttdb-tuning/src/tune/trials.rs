//! Where the trials of a search go as they are measured, Droplet's and the search's alike:
//! each is stored (a record of the workload on this host's target with its provenance, so
//! `ttdb export` writes lines TVM reads and an interrupted run loses nothing), the search's
//! progress is passed on, and the search stops on Ctrl-C or once storing failed.
use super::progress::Progress;
use super::record::{measurement_of, Sink};
use crate::search::interrupt;
use crate::search::observer::{MeasuredTrial, Observer};
use ttdb_store::store::StoreError;

/// Which search the trials come from, for their records' provenance.
#[derive(Clone, Copy, Debug)]
pub enum Provenance<'a> {
    /// The search from scratch: "search trial N (round R, ORIGIN)".
    Search,
    /// Droplet from the stored record `record` (when the start is one), the start described
    /// as `start`: "droplet trial N (CHANGE) of START".
    Droplet { record: Option<i64>, start: &'a str },
    /// A variant of the stored record `record` made for a reason the search cannot time
    /// (`crate::search::partition`), described as `how`: "variant (HOW) of record N".
    Variant { record: i64, how: &'a str },
}

/// Stores a search's trials as they come and passes its progress on (an [`Observer`] of
/// Droplet and of the search alike).
pub struct TrialSink<'a> {
    sink: &'a mut dyn Sink,
    provenance: Provenance<'a>,
    key: String,
    flops: f64,
    /// Trials stored so far: their number in the provenance.
    stored: usize,
    progress: Option<&'a mut dyn Progress>,
    /// Trials of the kernel before this search, added to the counts passed on.
    trials_before: usize,
    /// The first error storing trials; it stops the search.
    error: Option<StoreError>,
}

impl<'a> TrialSink<'a> {
    /// Trials of the workload of TVM key `key` (doing `flops` per run) into `sink`.
    pub fn new(
        sink: &'a mut dyn Sink,
        key: &str,
        flops: f64,
        provenance: Provenance<'a>,
    ) -> TrialSink<'a> {
        TrialSink {
            sink,
            provenance,
            key: key.to_string(),
            flops,
            stored: 0,
            progress: None,
            trials_before: 0,
            error: None,
        }
    }

    /// Passes the search's progress on to `progress`, counting `trials_before` trials of the
    /// kernel measured before it.
    pub fn reporting_to(
        mut self,
        progress: &'a mut dyn Progress,
        trials_before: usize,
    ) -> TrialSink<'a> {
        self.progress = Some(progress);
        self.trials_before = trials_before;
        self
    }

    /// The next trials are of another workload (a model's kernels take turns); their numbers
    /// count on.
    pub fn switch_workload(&mut self, key: String, flops: f64) {
        self.key = key;
        self.flops = flops;
    }

    /// The TVM key of the workload the trials are of.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Ctrl-C was pressed or storing failed: the search should stop, keeping what it has.
    pub fn should_stop(&self) -> bool {
        interrupt::requested() || self.error.is_some()
    }

    /// Ok, or the first error storing a trial (taken: a second call is Ok).
    pub fn finish(&mut self) -> Result<(), StoreError> {
        self.error.take().map_or(Ok(()), Err)
    }
}

impl<T: MeasuredTrial> Observer<T> for TrialSink<'_> {
    fn measured(&mut self, trials: &[T]) {
        // The kind of run the database files them under, and the record they came from.
        let (kind, origin) = match self.provenance {
            Provenance::Search => ("search", None),
            Provenance::Droplet { record, .. } => ("droplet", record),
            Provenance::Variant { record, .. } => ("search", Some(record)),
        };
        let items: Vec<_> = trials
            .iter()
            .map(|t| {
                self.stored += 1;
                let provenance = match self.provenance {
                    Provenance::Search => format!("search trial {} ({})", self.stored, t.how()),
                    Provenance::Droplet { start, .. } => {
                        format!("droplet trial {} ({}) of {start}", self.stored, t.how())
                    }
                    Provenance::Variant { record, how } => {
                        format!("variant ({how}) of record {record}")
                    }
                };
                measurement_of(
                    t.evaluation(),
                    self.key.clone(),
                    t.steps().to_vec(),
                    self.flops,
                    origin,
                    provenance,
                )
            })
            .collect();
        if self.error.is_none() {
            if let Err(e) = self.sink.keep(kind, &items) {
                self.error = Some(e);
            }
        }
    }
    fn progress(&mut self, trials: usize, best_seconds: f64) {
        if let Some(p) = &mut self.progress {
            p.trials(self.trials_before + trials, best_seconds);
        }
    }
    fn interrupted(&self) -> bool {
        self.should_stop()
    }
}
