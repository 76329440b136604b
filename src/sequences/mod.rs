//! Active sequences: what each worker is already computing, the router's load signal.
//!
//! - [`ActiveSequences`] tracks one worker, single-threaded.
//! - [`MultiWorkerSequences`] tracks a fleet of (worker, dp_rank) from many threads at once.

mod clock;
mod error;
mod load;
mod owners;
mod request_id;
mod requests;
mod shard;
mod single;
mod trie;

use std::time::Duration;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{AddRequestError, ConfigError, UnknownRequest};
pub use load::{PotentialLoad, WorkerLoad};
pub use request_id::RequestId;
pub use single::ActiveSequences;

/// How long a request may stay in flight before it is presumed lost and dropped: 300 s.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(300);
