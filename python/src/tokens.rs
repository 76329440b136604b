//! Token arguments: any buffer of `uint32` (bytes, bytearray, `array.array('I')`, a numpy
//! `uint32` array) read without converting element by element, or a sequence of ints.
//!
//! `bytes` and, on CPython >= 3.11, buffer-protocol arrays are read in place (no copy: the
//! per-call cost of `route` is what this module saves). The wheel targets the stable ABI of
//! CPython 3.9, which has no buffer protocol (`PyObject_GetBuffer` joined the limited API in
//! 3.11); there a typed array is read through its `tobytes()` (one copy of its memory, no
//! per-element work) after its item type is checked.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyTuple};

// Buffers are read as native u32s and raw bytes as little-endian ones: the same on every target
// the wheel ships for.
#[cfg(not(target_endian = "little"))]
compile_error!("kvroute-python reads token buffers as little-endian u32s");

/// Token ids read from a Python argument.
pub enum Tokens<'a> {
    /// Memory nothing can change while it is borrowed: an immutable `bytes` object's.
    Frozen(&'a [u32]),
    /// A mutable exporter's memory (array, numpy): read it only with the GIL held.
    Borrowed(&'a [u32]),
    /// Converted from a list, a tuple or another iterable.
    Owned(Vec<u32>),
}

impl Tokens<'_> {
    /// The token ids, to read with the GIL held.
    pub fn as_slice(&self) -> &[u32] {
        match self {
            Self::Frozen(t) | Self::Borrowed(t) => t,
            Self::Owned(t) => t,
        }
    }
}

/// Little-endian `u32`s out of raw bytes.
pub fn copy_le(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn whole_u32s(bytes: &[u8]) -> PyResult<()> {
    match bytes.len().is_multiple_of(4) {
        true => Ok(()),
        false => Err(PyValueError::new_err(format!(
            "a token buffer holds whole uint32s: {} bytes is not a multiple of 4",
            bytes.len()
        ))),
    }
}

/// Whether a typed array (`array.array` or numpy) holds 4-byte unsigned ints.
fn is_u32_array(obj: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    // array.array: typecode 'I' (4 bytes on every platform the wheel ships for).
    if let Ok(code) = obj.getattr(pyo3::intern!(obj.py(), "typecode")) {
        let code: String = code.extract()?;
        return Ok(Some(code == "I"));
    }
    // numpy: dtype.kind 'u' with itemsize 4, native or little-endian order.
    if let Ok(dtype) = obj.getattr(pyo3::intern!(obj.py(), "dtype")) {
        let py = obj.py();
        let kind: String = dtype.getattr(pyo3::intern!(py, "kind"))?.extract()?;
        let size: usize = dtype.getattr(pyo3::intern!(py, "itemsize"))?.extract()?;
        let order: String = dtype.getattr(pyo3::intern!(py, "byteorder"))?.extract()?;
        let ndim: usize = obj.getattr(pyo3::intern!(py, "ndim"))?.extract()?;
        return Ok(Some(kind == "u" && size == 4 && order != ">" && ndim == 1));
    }
    Ok(None)
}

fn ints<'py>(items: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>) -> PyResult<Vec<u32>> {
    items.map(|item| item?.extract::<u32>()).collect()
}

/// Calls `f` on `obj`'s token ids, read in place where the argument allows.
pub fn with_tokens<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(Tokens<'_>) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(bytes) = obj.downcast::<PyBytes>() {
        let bytes = bytes.as_bytes();
        whole_u32s(bytes)?;
        // SAFETY: every bit pattern is a valid u32; `align_to` only takes the aligned middle.
        return match unsafe { bytes.align_to::<u32>() } {
            ([], words, []) => f(Tokens::Frozen(words)),
            _ => f(Tokens::Owned(copy_le(bytes))),
        };
    }
    if let Ok(array) = obj.downcast::<PyByteArray>() {
        let bytes = array.to_vec();
        whole_u32s(&bytes)?;
        return f(Tokens::Owned(copy_le(&bytes)));
    }
    if let Ok(list) = obj.downcast::<PyList>() {
        return f(Tokens::Owned(ints(list.iter().map(Ok))?));
    }
    if let Ok(tuple) = obj.downcast::<PyTuple>() {
        return f(Tokens::Owned(ints(tuple.iter().map(Ok))?));
    }
    let mut f = Some(f);
    // CPython >= 3.11: the buffer protocol reads a uint32 array's memory in place.
    if crate::buffer::available(obj.py()) {
        let call = |words: &[u32]| (f.take().expect("called once"))(Tokens::Borrowed(words));
        if let Some(out) = crate::buffer::with_u32(obj, call) {
            return out;
        }
    }
    let f = f.take().expect("not called yet");
    match is_u32_array(obj)? {
        Some(true) => {
            let raw = obj.call_method0(pyo3::intern!(obj.py(), "tobytes"))?;
            let bytes = raw.downcast::<PyBytes>()?.as_bytes();
            whole_u32s(bytes)?;
            f(Tokens::Owned(copy_le(bytes)))
        }
        Some(false) => Err(PyTypeError::new_err(
            "token arrays must hold uint32 (array.array('I') or a 1-d numpy uint32 array)",
        )),
        // Any other iterable of ints.
        None => f(Tokens::Owned(ints(obj.try_iter()?)?)),
    }
}

/// Reads `obj` as token ids into a new vector.
pub fn tokens(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    with_tokens(obj, |tokens| {
        Ok(match tokens {
            Tokens::Owned(t) => t,
            other => other.as_slice().to_vec(),
        })
    })
}
