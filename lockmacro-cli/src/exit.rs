//! How a run ends: the exit codes documented in `--help` and the README.

use std::fmt;
use std::process::ExitCode;

use lockmacro_runtime::LockError;

/// The command did what was asked.
pub const DONE: u8 = 0;
/// The key was free, nothing was released, or the operator declined.
pub const NOTHING: u8 = 1;
/// The command line was wrong.
pub const USAGE: u8 = 2;
/// The backend failed or cannot do this.
pub const BACKEND: u8 = 3;
/// The URL names a PostgreSQL database without lockmacro's tables: nothing
/// is held there, or it is the wrong database.
pub const NO_TABLES: u8 = 4;

/// A run that ends with an error message and its exit code.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }

    pub fn code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<LockError> for Failure {
    fn from(err: LockError) -> Self {
        // What the operator typed is wrong, not the backend.
        let code = match err {
            LockError::InvalidUrl { .. } | LockError::InvalidKey { .. } => USAGE,
            _ => BACKEND,
        };
        Failure {
            code,
            message: err.to_string(),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Self {
        Failure {
            code: BACKEND,
            message: format!("cannot write the output: {err}"),
        }
    }
}
