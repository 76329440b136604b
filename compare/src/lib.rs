//! Side-by-side measurements of kvroute against NVIDIA Dynamo's `dynamo-kv-router` 1.6.1.
//!
//! Each binary in `src/bin/` compares one surface; the modules here are their shared parts:
//! the [`subject::Subject`] surface every index under test is driven through, one module per
//! subject, the event conversion to Dynamo's types, the workload, and the measurement, result
//! line and table of the index comparison.

pub mod convert;
pub mod dynamo_crtc;
pub mod dynamo_radix;
pub mod kvroute_pool;
pub mod latency;
pub mod measure;
pub mod memory;
pub mod outcome;
pub mod reference;
pub mod report;
pub mod subject;
pub mod workload;
