//! What readers load: the runs each lane publishes, and the table they are found in.
//!
//! A lane (`lane/`) is the only writer; queries (`walk.rs`) read without locks, pinned in the
//! epoch, as many at once as there are callers.
//!
//! - `run.rs`: [`Run`](run::Run), one version of a run (a chain of blocks with the same holders
//!   that branches only at its end): its identity, content hashes, tail id and holders in one
//!   allocation sized to the run; [`RunState`](run::RunState), what a version is made from.
//! - `versions.rs`: making versions, the owned allocation a table slot keeps, and the lane's
//!   reclaimed version memory, reused by size.
//! - `locals.rs`: a version's content hashes, inline or a window onto ones its versions share.
//! - `holder_sets.rs`, `worker_slots.rs`: a run's holders, as bits of the lane's 64 worker
//!   slots (which queries AND per run) or a sorted list past 64 workers; who each slot is.
//! - `run_table.rs`: the lane's table from a run's key (where it hangs, its first content
//!   hash) to the run.
//!
//! What it guarantees: a reader sees each run whole, as it was before or after a change (a
//! version is never changed in place but for its holder bits, which a reader loads in one step,
//! and its id, which readers do not use), and what it loads lives while it stays pinned; a
//! worker slot is handed out again only once no pinned reader can hold its old bit; every
//! lookup checks a run's identity, so keys made to collide cost a longer probe, never a wrong
//! run. Nothing here imports the lane or the walk.

pub(super) mod holder_sets;
pub(super) mod locals;
pub(super) mod run;
pub(super) mod run_table;
pub(super) mod versions;
pub(super) mod worker_slots;
