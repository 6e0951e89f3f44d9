//! `FaultTolerance`: phalanx's generations (`phalanx_pg::FaultTolerance`, Note [FT generations])
//! for Python, the native side of `phalanx_torch.ft.Manager`. Each method that connects a
//! generation gives a new `Group` (this crate's `group.rs`), the process group of that
//! generation's members; every wait runs with the GIL released.
//!
//! ```python
//! from phalanx_torch._native import FaultTolerance
//! ft = FaultTolerance.from_env()   # None unless under `phalanx launch --fault-tolerance`
//! group = ft.join()                # None: a replacement found the run over
//! ```

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;

use crate::group::Group;
use crate::PhalanxError;

fn err(e: phalanx_pg::Error) -> PyErr {
    PhalanxError::new_err(e.to_string())
}

/// A rank's place in the generations of its round (the native side of `phalanx_torch.ft`).
#[pyclass(frozen, module = "phalanx_torch._native")]
pub(crate) struct FaultTolerance {
    /// Behind a lock: Python may call from any thread, and the Rust type caches the counter.
    ft: Mutex<phalanx_pg::FaultTolerance>,
    /// What bounds every wait of its groups (`PHALANX_TIMEOUT`).
    timeout: Duration,
}

impl FaultTolerance {
    /// Runs `f` on the Rust side with the GIL released, and wraps a group it connected.
    fn connecting<F>(&self, py: Python<'_>, f: F) -> PyResult<Option<Group>>
    where
        F: FnOnce(
                &mut phalanx_pg::FaultTolerance,
            ) -> phalanx_pg::Result<Option<phalanx_pg::ProcessGroup>>
            + Send,
    {
        let pg = py.detach(|| f(&mut self.ft.lock().unwrap())).map_err(err)?;
        Ok(pg.map(|pg| Group::connected(pg, self.timeout)))
    }

    fn with<T>(&self, f: impl FnOnce(&phalanx_pg::FaultTolerance) -> T) -> T {
        f(&self.ft.lock().unwrap())
    }
}

#[pymethods]
impl FaultTolerance {
    /// This worker's place when `phalanx launch --fault-tolerance` started it
    /// (`PHALANX_FAULT_TOLERANCE=1`), else `None`.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Option<FaultTolerance>> {
        let timeout =
            phalanx_core::Timeout::from_env().map_err(|e| PhalanxError::new_err(e.to_string()))?;
        let ft = py
            .detach(phalanx_pg::FaultTolerance::from_env)
            .map_err(err)?;
        Ok(ft.map(|ft| FaultTolerance {
            ft: Mutex::new(ft),
            timeout,
        }))
    }

    /// The rank this process held in the round's first generation: its share of the data.
    #[getter]
    fn slot(&self) -> usize {
        self.with(|f| f.slot())
    }

    /// The round's first world size.
    #[getter]
    fn slots(&self) -> usize {
        self.with(|f| f.slots())
    }

    #[getter]
    fn generation(&self) -> u64 {
        self.with(|f| f.generation())
    }

    /// The slots of the current generation, ascending.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.with(|f| f.members().to_vec())
    }

    /// Started to replace a dead worker: it holds no state and takes a peer's.
    #[getter]
    fn is_replacement(&self) -> bool {
        self.with(|f| f.is_replacement())
    }

    /// Tells the launcher that this program re-forms its group (a dead worker is then
    /// replaced alone instead of restarting the group).
    fn take_part(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.with(|f| f.take_part())).map_err(err)
    }

    /// The first group: generation 0, or for a replacement the generation it adds itself to;
    /// `None` when the run ended before it could join.
    fn join(&self, py: Python<'_>) -> PyResult<Option<Group>> {
        self.connecting(py, |f| f.join())
    }

    /// The newest generation (the store read at most every 50 ms); the ranks agree on one
    /// value (allreduce MAX) before they `advance`.
    fn newest(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.with(|f| f.newest())).map_err(err)
    }

    /// Connects generation `to`, which every rank agreed on at a step boundary.
    fn advance(&self, py: Python<'_>, to: u64) -> PyResult<Group> {
        let g = self.connecting(py, |f| f.advance(to).map(Some))?;
        Ok(g.expect("advance connects a group"))
    }

    /// After `cause` (a failed collective's message) broke this rank's group: waits up to
    /// `PHALANX_TIMEOUT` for the launcher to record the change, then connects the newest
    /// generation.
    fn regroup(&self, py: Python<'_>, cause: String) -> PyResult<Group> {
        let g = self.connecting(py, |f| {
            let failure = phalanx_pg::Error::Failed {
                rank: f.slot(),
                cause,
            };
            f.regroup(failure).map(Some)
        })?;
        Ok(g.expect("regroup connects a group"))
    }

    /// The run is complete: the lowest member writes `end`, so a rank still joining exits.
    /// Call it on every rank after the last collective, with the current group.
    fn finish(&self, py: Python<'_>, group: &Group) -> PyResult<()> {
        let pg = group.process_group();
        py.detach(|| self.with(|f| f.finish(pg))).map_err(err)
    }
}
