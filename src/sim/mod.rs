//! Workload simulation: trace loading (and, later, mock engines and the fleet replayer).

pub mod trace;
