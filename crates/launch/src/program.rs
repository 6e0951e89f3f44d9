//! torchrun's program rules: what `phalanx launch [flags] PROGRAM ARGS` runs.
//!
//! - `train.py ARGS`: a Python script runs as `python3 train.py ARGS` (`$PHALANX_PYTHON`
//!   instead of `python3` when set), as torchrun runs it with its own interpreter;
//! - `-m MODULE ARGS` (`--module`): `python3 -m MODULE ARGS`;
//! - `--no-python PROGRAM ARGS`: the program as it is;
//! - anything else that is not a `.py` file also runs as it is (a binary, `sh -c …`).
//!
//! ```
//! use std::ffi::OsString;
//! use phalanx_launch::program_argv;
//! let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
//! let py = OsString::from("python3");
//! assert_eq!(program_argv(&argv(&["train.py", "-e", "3"]), false, false, &py).unwrap(),
//!            argv(&["python3", "train.py", "-e", "3"]));
//! assert_eq!(program_argv(&argv(&["pkg.train"]), true, false, &py).unwrap(),
//!            argv(&["python3", "-m", "pkg.train"]));
//! assert_eq!(program_argv(&argv(&["train.py"]), false, true, &py).unwrap(), argv(&["train.py"]));
//! assert_eq!(program_argv(&argv(&["./train"]), false, false, &py).unwrap(), argv(&["./train"]));
//! ```

use std::ffi::OsString;

use crate::Error;

/// The interpreter for Python programs: `$PHALANX_PYTHON`, else `python3`.
pub fn python() -> OsString {
    phalanx_core::env::get(phalanx_core::env::PHALANX_PYTHON)
        .unwrap_or_else(|| phalanx_core::env::PHALANX_PYTHON.default.to_string())
        .into()
}

/// The argv that runs `program` under the rules above; `module` is `-m`, `no_python`
/// `--no-python`, `python` the interpreter.
pub fn program_argv(
    program: &[OsString],
    module: bool,
    no_python: bool,
    python: &OsString,
) -> Result<Vec<OsString>, Error> {
    let Some(first) = program.first() else {
        return Err(Error::NoProgram);
    };
    if module && no_python {
        return Err(Error::ProgramRules(
            "-m/--module runs a Python module and --no-python runs the program as it is; \
             use one of them"
                .into(),
        ));
    }
    let is_script = std::path::Path::new(first)
        .extension()
        .is_some_and(|e| e == "py");
    let mut argv = Vec::with_capacity(program.len() + 2);
    if module {
        argv.extend([python.clone(), "-m".into()]);
    } else if is_script && !no_python {
        argv.push(python.clone());
    }
    argv.extend(program.iter().cloned());
    Ok(argv)
}

/// Whether `argv` runs a Python interpreter (`train.py` and `-m` run under one).
pub(crate) fn runs_python(argv: &[OsString]) -> bool {
    argv.first().is_some_and(|p| {
        std::path::Path::new(p)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
    })
}
