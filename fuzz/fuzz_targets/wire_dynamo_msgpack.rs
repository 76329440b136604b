//! Dynamo `RouterEvent` named MessagePack on arbitrary bytes: refuse or decode, never panic;
//! what decodes re-encodes to the same event.
//!
//! `cargo +nightly fuzz run wire_dynamo_msgpack fuzz/corpus/wire_dynamo_msgpack`
#![no_main]

use kvroute::wire::{dynamo_from_msgpack, dynamo_to_msgpack};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(event) = dynamo_from_msgpack(data) {
        assert_eq!(dynamo_from_msgpack(&dynamo_to_msgpack(&event)).as_ref(), Ok(&event));
    }
});
