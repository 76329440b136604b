//! Token arguments: any buffer of `uint32` (bytes, bytearray, `array.array('I')`, a numpy
//! `uint32` array) read without converting element by element, or a sequence of ints.
//!
//! The wheel targets the stable ABI of CPython 3.9, which has no buffer protocol
//! (`PyObject_GetBuffer` joined the limited API in 3.11); so a typed array is read through its
//! `tobytes()` (one copy of its memory, no per-element work) after its item type is checked.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyTuple};

/// Little-endian `u32`s out of raw bytes (the host order of every target the wheel ships for).
fn from_le_bytes(bytes: &[u8], out: &mut Vec<u32>) -> PyResult<()> {
    if !bytes.len().is_multiple_of(4) {
        return Err(PyValueError::new_err(format!(
            "a token buffer holds whole uint32s: {} bytes is not a multiple of 4",
            bytes.len()
        )));
    }
    out.clear();
    out.extend(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    Ok(())
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

/// Reads `obj` as token ids into `out` (cleared first).
pub fn read_tokens(obj: &Bound<'_, PyAny>, out: &mut Vec<u32>) -> PyResult<()> {
    if let Ok(bytes) = obj.downcast::<PyBytes>() {
        return from_le_bytes(bytes.as_bytes(), out);
    }
    if let Ok(array) = obj.downcast::<PyByteArray>() {
        return from_le_bytes(&array.to_vec(), out);
    }
    if let Ok(list) = obj.downcast::<PyList>() {
        out.clear();
        out.reserve(list.len());
        for item in list.iter() {
            out.push(item.extract::<u32>()?);
        }
        return Ok(());
    }
    if let Ok(tuple) = obj.downcast::<PyTuple>() {
        out.clear();
        out.reserve(tuple.len());
        for item in tuple.iter() {
            out.push(item.extract::<u32>()?);
        }
        return Ok(());
    }
    // CPython >= 3.11: the buffer protocol copies a uint32 array's memory straight.
    if crate::buffer::available(obj.py()) && crate::buffer::read_u32(obj, out).is_some() {
        return Ok(());
    }
    match is_u32_array(obj)? {
        Some(true) => {
            let raw = obj.call_method0(pyo3::intern!(obj.py(), "tobytes"))?;
            from_le_bytes(raw.downcast::<PyBytes>()?.as_bytes(), out)
        }
        Some(false) => Err(PyTypeError::new_err(
            "token arrays must hold uint32 (array.array('I') or a 1-d numpy uint32 array)",
        )),
        None => {
            // Any other iterable of ints.
            out.clear();
            for item in obj.try_iter()? {
                out.push(item?.extract::<u32>()?);
            }
            Ok(())
        }
    }
}

/// Reads `obj` as token ids into a new vector.
pub fn tokens(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let mut out = Vec::new();
    read_tokens(obj, &mut out)?;
    Ok(out)
}
