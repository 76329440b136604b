//! `BlockHasher`: Dynamo's block and sequence hashes of a prompt, as the router computes them.

use pyo3::prelude::*;

use kvroute::hash::BlockHasher;

use crate::errors;
use crate::tokens::tokens as read;

/// Hashes a prompt's full blocks: content ("local") hashes and prefix ("sequence") hashes,
/// byte for byte Dynamo's (seed 1337, salted by the LoRA name and cache namespace).
#[pyclass(name = "BlockHasher", module = "kvroute", frozen)]
pub struct PyBlockHasher {
    inner: BlockHasher,
}

#[pymethods]
impl PyBlockHasher {
    /// A hasher for `block_size`-token blocks (0 raises `ConfigError`).
    #[new]
    #[pyo3(signature = (block_size, *, lora_name=None, cache_namespace=None))]
    fn new(
        block_size: u32,
        lora_name: Option<&str>,
        cache_namespace: Option<&str>,
    ) -> PyResult<Self> {
        let mut inner = BlockHasher::new(block_size).map_err(errors::hash)?;
        if let Some(lora) = lora_name {
            inner = inner.with_lora(lora);
        }
        if let Some(ns) = cache_namespace {
            inner = inner.with_namespace(ns);
        }
        Ok(Self { inner })
    }

    /// Tokens per block.
    #[getter]
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }

    /// The hash seed (1337, salted by the LoRA name and namespace).
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    /// The content hash of each full block of `tokens`.
    fn local_hashes(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let tokens = read(tokens)?;
        let hashes = py.allow_threads(|| self.inner.local_hashes(&tokens));
        Ok(hashes.into_iter().map(|h| h.0).collect())
    }

    /// The sequence (prefix) hash of each full block of `tokens`.
    fn sequence_hashes(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let tokens = read(tokens)?;
        let hashes = py.allow_threads(|| self.inner.hash_request(&tokens));
        Ok(hashes.sequence.into_iter().map(|h| h.0).collect())
    }

    /// Both: `(local_hashes, sequence_hashes)`.
    fn hash_request(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<u64>, Vec<u64>)> {
        let tokens = read(tokens)?;
        let hashes = py.allow_threads(|| self.inner.hash_request(&tokens));
        Ok((
            hashes.local.into_iter().map(|h| h.0).collect(),
            hashes.sequence.into_iter().map(|h| h.0).collect(),
        ))
    }

    fn __repr__(&self) -> String {
        format!("BlockHasher(block_size={}, seed={})", self.inner.block_size(), self.inner.seed())
    }
}
