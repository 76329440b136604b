//! # kvroute-gateway
//!
//! kvroute in front of real engines: an OpenAI-compatible, KV-aware HTTP gateway, a mock vLLM
//! engine to run it against without GPUs, and the pieces both share.
//!
//! Layout:
//! - [`tokenize`]: the engines' tokenization (HF `tokenizer.json` and the chat template);
//! - [`openai`]: the request fields read, the error body, the responses and stream chunks;
//! - [`vllm_hash`]: vLLM's block hashes, so mock engines publish the names real ones would;
//! - [`http_server`]: the axum server both run on;
//! - [`serve`]: `kvroute serve`, the gateway;
//! - [`mocker`]: `kvroute mocker`, the mock engine;
//! - [`bench`](mod@bench): `kvroute bench`, a trace replayed over HTTP against any OpenAI endpoint.
//!
//! The library `kvroute` stays free of an async runtime and of HTTP; everything here runs on
//! tokio and is used by the CLI (`kvroute mocker`).
#![cfg(not(loom))]

pub mod bench;
pub mod http_server;
pub mod mocker;
pub mod openai;
pub mod serve;
pub mod tokenize;
pub mod vllm_hash;
