//! `PyStore`: the store PyTorch hands a backend factory (a `PrefixStore` over its TCPStore, or
//! whatever `init_process_group(store=…)` was given), seen from Rust as a phalanx [`Store`], so
//! the rendezvous of phalanx's mesh goes through it.
//!
//! Every call takes the GIL for the length of one Python call: phalanx calls the store from
//! the thread that connects the mesh (with the GIL released by the caller) and, on a failure,
//! from the thread that reports it.

use std::sync::Mutex;
use std::time::Duration;

use phalanx_store::{Error, Result, Store};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

pub(crate) struct PyStore {
    store: Py<PyAny>,
    timeout: Mutex<Duration>,
}

impl PyStore {
    pub(crate) fn new(store: Py<PyAny>, timeout: Duration) -> PyStore {
        PyStore {
            store,
            timeout: Mutex::new(timeout),
        }
    }

    /// Runs `f` on the Python store under the GIL; a Python exception becomes a store error
    /// naming the operation and key (a `DistStoreError` about a timeout: [`Error::Timeout`]).
    fn call<T>(
        &self,
        op: &'static str,
        key: &str,
        f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
    ) -> Result<T> {
        Python::attach(|py| f(self.store.bind(py))).map_err(|e| {
            let text = e.to_string();
            if text.contains("timeout") || text.contains("Timeout") {
                Error::Timeout {
                    key: key.to_string(),
                    after: self.timeout(),
                }
            } else {
                Error::Protocol {
                    addr: "the store PyTorch handed to the backend".into(),
                    reason: format!("{op} {key:?}: {text}"),
                }
            }
        })
    }
}

fn timedelta<'py>(py: Python<'py>, d: Duration) -> PyResult<Bound<'py, PyAny>> {
    py.import("datetime")?
        .getattr("timedelta")?
        .call1((0, d.as_secs_f64()))
}

fn bytes<'py>(py: Python<'py>, v: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, v)
}

impl Store for PyStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call("set", key, |s| {
            s.call_method1("set", (key, bytes(s.py(), value))).map(drop)
        })
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        // PyTorch's `get` waits with the store's own timeout; ours is the one that counts.
        self.wait(&[key])?;
        self.call("get", key, |s| s.call_method1("get", (key,))?.extract())
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.call("add", key, |s| {
            s.call_method1("add", (key, delta))?.extract()
        })
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.call("compare_set", key, |s| {
            let py = s.py();
            s.call_method1(
                "compare_set",
                (key, bytes(py, expected), bytes(py, desired)),
            )?
            .extract()
        })
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let first = keys.first().copied().unwrap_or_default();
        self.call("wait", first, |s| {
            let keys = PyList::new(s.py(), keys)?;
            s.call_method1("wait", (keys, timedelta(s.py(), timeout)?))
                .map(drop)
        })
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        let first = keys.first().copied().unwrap_or_default();
        self.call("check", first, |s| {
            s.call_method1("check", (PyList::new(s.py(), keys)?,))?
                .extract()
        })
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        self.call("delete_key", key, |s| {
            s.call_method1("delete_key", (key,))?.extract()
        })
    }
    fn num_keys(&self) -> Result<i64> {
        self.call("num_keys", "", |s| s.call_method0("num_keys")?.extract())
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call("append", key, |s| {
            s.call_method1("append", (key, bytes(s.py(), value)))
                .map(drop)
        })
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.wait(keys)?;
        let first = keys.first().copied().unwrap_or_default();
        self.call("multi_get", first, |s| {
            s.call_method1("multi_get", (PyList::new(s.py(), keys)?,))?
                .extract()
        })
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let first = keys.first().copied().unwrap_or_default();
        self.call("multi_set", first, |s| {
            let py = s.py();
            let values: Vec<Bound<'_, PyBytes>> = values.iter().map(|v| bytes(py, v)).collect();
            s.call_method1(
                "multi_set",
                (PyList::new(py, keys)?, PyList::new(py, values)?),
            )
            .map(drop)
        })
    }
    fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_timeout(&self, t: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}
