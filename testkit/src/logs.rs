//! What the library tells `tracing`, captured as text for a test: on the
//! thread that captures, so a test that needs the library's tasks logged
//! too runs on a current-thread runtime.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// Events at `level` and above, as `tracing_subscriber`'s plain format
/// writes them, until this is dropped.
pub struct Logs {
    text: Arc<Mutex<Vec<u8>>>,
    _default: DefaultGuard,
}

#[derive(Clone)]
struct Writer(Arc<Mutex<Vec<u8>>>);

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Starts capturing on this thread. Tests on other threads hit the same
    /// callsites, and one that registers a callsite while this thread
    /// installs its subscriber can leave it cached as uninteresting: the
    /// cache is rebuilt once the subscriber is in place.
    pub fn capture(level: tracing::Level) -> Logs {
        let text = Arc::new(Mutex::new(Vec::new()));
        let writer = Writer(text.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let default = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        Logs {
            text,
            _default: default,
        }
    }

    /// What was captured so far.
    pub fn text(&self) -> String {
        let text = self
            .text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        String::from_utf8_lossy(&text).into_owned()
    }

    /// Forgets what was captured so far.
    pub fn clear(&self) {
        self.text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}
