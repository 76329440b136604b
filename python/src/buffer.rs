//! The buffer protocol on CPython >= 3.11, where it is part of the stable ABI: a typed array's
//! memory is read in place, without `tobytes()`'s intermediate object.
//!
//! pyo3 does not declare `Py_buffer` for an abi3-py39 build (the protocol joined the limited
//! API in 3.11), so the struct and the two functions are declared here exactly as CPython 3.11's
//! stable ABI defines them (the layout has not changed since 3.3). They are called only when
//! the running interpreter is 3.11 or newer; on 3.9 and 3.10 the symbols exist in the
//! interpreter (so the module loads) but are never called.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use pyo3::ffi::{Py_ssize_t, PyObject};
use pyo3::prelude::*;

/// CPython's `Py_buffer` (Include/pybuffer.h, stable ABI since 3.11).
#[repr(C)]
struct PyBufferView {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: Py_ssize_t,
    itemsize: Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut Py_ssize_t,
    strides: *mut Py_ssize_t,
    suboffsets: *mut Py_ssize_t,
    internal: *mut c_void,
}

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut PyBufferView, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferView);
}

/// `PyBUF_C_CONTIGUOUS | PyBUF_FORMAT`: one C-contiguous block, with its item format.
const FLAGS: c_int = 0x0020 | 0x0010 | 0x0008 | 0x0004;

/// Whether the running interpreter has the buffer protocol in its stable ABI (asked once:
/// `version_info` parses the version string, a few µs).
pub fn available(py: Python<'_>) -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| py.version_info() >= (3, 11))
}

/// Calls `f` on `obj`'s memory as `u32`s when it exports a C-contiguous 1-d buffer of 4-byte
/// unsigned ints (format `I`, native or `=`/`<` order): in place when it is 4-byte aligned, else
/// through a copy. `None` when it exports no such buffer (the caller falls back to other
/// readings); the Python error, if any, is cleared. The slice is valid only inside `f`, which
/// runs with the GIL held: the exporter's memory is mutable, so `f` must not release it while
/// reading (copy first).
pub fn with_u32<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u32]) -> R) -> Option<R> {
    debug_assert!(available(obj.py()));
    let mut view = std::mem::MaybeUninit::<PyBufferView>::uninit();
    // SAFETY: `obj` is a live object and the GIL is held (a `Bound` proves both); `view` is
    // writable memory of the exact struct CPython >= 3.11 fills (checked by the caller through
    // `available`). On failure nothing was acquired and a Python error is set, cleared below.
    let got = unsafe { PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), FLAGS) };
    if got != 0 {
        drop(PyErr::take(obj.py()));
        return None;
    }
    // SAFETY: GetBuffer succeeded, so CPython initialised the view.
    let mut view = unsafe { view.assume_init() };
    // SAFETY: a non-null `format` is a NUL-terminated string owned by the exporter, valid
    // until the buffer is released below (it is only read before that).
    let format = (!view.format.is_null()).then(|| unsafe { CStr::from_ptr(view.format) });
    let fits = matches!(format.map(CStr::to_bytes), Some(b"I" | b"=I" | b"<I" | b"@I"))
        && view.itemsize == 4
        && view.ndim == 1
        && view.len >= 0
        && view.len % 4 == 0;
    let out = fits.then(|| {
        let len = view.len as usize;
        // SAFETY: the exporter guarantees `buf` points to `len` readable, C-contiguous bytes
        // until release, which happens after `f` returns; the GIL stays held meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts(view.buf as *const u8, len) };
        // SAFETY: every bit pattern is a valid u32; `align_to` only takes the aligned middle.
        match unsafe { bytes.align_to::<u32>() } {
            ([], words, []) => f(words),
            _ => f(&crate::tokens::copy_le(bytes)),
        }
    });
    // SAFETY: releases exactly the buffer acquired above, once, with the GIL held.
    unsafe { PyBuffer_Release(&mut view) };
    out
}
