//! Mooncake trace loading. (stub replaced by the trace helper)
