//! Dynamo `RouterEvent` JSON on arbitrary bytes: refuse or decode, never panic; what decodes
//! re-encodes to the same event.
//!
//! `cargo +nightly fuzz run wire_dynamo_json fuzz/corpus/wire_dynamo_json`
#![no_main]

use kvroute::wire::{dynamo_from_json, dynamo_to_json};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(event) = dynamo_from_json(data) {
        assert_eq!(dynamo_from_json(dynamo_to_json(&event).as_bytes()).as_ref(), Ok(&event));
    }
});
