//! The package's defaults, in one place.

use std::time::Duration;

/// How often a blocking wait looks for Ctrl-C.
pub const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// How long interpreter exit waits for the client's tasks to stop.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// How long `Client.watch` waits unless told.
pub const WATCH_DEFAULT: Duration = Duration::from_secs(60);
