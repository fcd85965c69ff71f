//! systemd's notification protocol (`sd_notify`): tell the service manager that bmo is
//! ready, that it is still alive (watchdog), and that it is stopping.
//!
//! The protocol is one datagram per message to the Unix socket named by
//! `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket). Without that variable
//! (not started by systemd with `Type=notify`) every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

/// Why a notification could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("cannot send {message:?} to systemd's notify socket {socket}: {source}")]
    Send {
        message: String,
        socket: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

/// A handle on systemd's notify socket, or on nothing when bmo was not started with
/// `Type=notify`.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    target: Option<Target>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`, as systemd sets them.
    pub fn from_env() -> Self {
        let socket = std::env::var("NOTIFY_SOCKET").ok();
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        Self::new(socket.as_deref(), usec.as_deref(), pid.as_deref())
    }

    /// From the three variables' values.
    pub fn new(
        socket: Option<&str>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
    ) -> Self {
        let target = socket
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix('@') {
                Some(name) => Target::Abstract(name.as_bytes().to_vec()),
                None => Target::Path(PathBuf::from(s)),
            });
        // WATCHDOG_PID names the process the watchdog is meant for; a child that
        // inherited the variables must not ping on its parent's behalf.
        let for_us = watchdog_pid
            .map(|p| p.trim().parse::<u32>().ok() == Some(std::process::id()))
            .unwrap_or(true);
        let watchdog = watchdog_usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0 && for_us && target.is_some())
            .map(Duration::from_micros);
        Self { target, watchdog }
    }

    /// Whether systemd listens (bmo runs under `Type=notify`).
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog timeout systemd set (`WatchdogSec=`), if any.
    pub fn watchdog_timeout(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends one message such as `READY=1`; does nothing without a socket.
    pub fn send(&self, message: &str) -> Result<(), NotifyError> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        let err = |source| NotifyError::Send {
            message: message.to_owned(),
            socket: match target {
                Target::Path(p) => p.display().to_string(),
                Target::Abstract(name) => format!("@{}", String::from_utf8_lossy(name)),
            },
            source,
        };
        let socket = UnixDatagram::unbound().map_err(err)?;
        match target {
            Target::Path(path) => socket.send_to(message.as_bytes(), path).map(drop),
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .and_then(|addr| socket.send_to_addr(message.as_bytes(), &addr))
                    .map(drop)
            }
        }
        .map_err(err)
    }

    /// `READY=1` with a status line for `systemctl status`.
    pub fn ready(&self, status: &str) -> Result<(), NotifyError> {
        self.send(&format!("READY=1\nSTATUS={status}"))
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) -> Result<(), NotifyError> {
        self.send("STOPPING=1")
    }

    /// Pings the watchdog at half its timeout from a task on the current tokio
    /// runtime, so the pings stop (and systemd restarts bmo) when the runtime hangs.
    /// Returns `None` when no watchdog is set.
    pub fn spawn_watchdog(&self) -> Option<tokio::task::JoinHandle<()>> {
        let timeout = self.watchdog?;
        let notifier = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(timeout / 2);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = notifier.send("WATCHDOG=1") {
                    tracing::warn!(error = %e, "watchdog ping failed");
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (tempdir::Dir, UnixDatagram, String) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (dir, socket, path.display().to_string())
    }

    fn receive(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    /// A directory removed on drop (no crate for something this small).
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::hash::{BuildHasher, Hasher};
                let r = std::hash::RandomState::new().build_hasher().finish();
                let p = std::env::temp_dir().join(format!("bmo-notify-{r:016x}"));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn without_notify_socket_nothing_is_sent_and_nothing_fails() {
        let n = Notifier::new(None, Some("30000000"), None);
        assert!(!n.is_enabled());
        assert_eq!(n.watchdog_timeout(), None);
        n.ready("up").unwrap();
    }

    #[test]
    fn ready_reaches_the_socket_as_one_datagram() {
        let (_dir, socket, path) = listener();
        let n = Notifier::new(Some(&path), None, None);
        n.ready("controller running").unwrap();
        assert_eq!(receive(&socket), "READY=1\nSTATUS=controller running");
        n.stopping().unwrap();
        assert_eq!(receive(&socket), "STOPPING=1");
    }

    #[test]
    fn abstract_sockets_are_reached_by_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("bmo-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Notifier::new(Some(&format!("@{name}")), None, None)
            .send("WATCHDOG=1")
            .unwrap();
        assert_eq!(receive(&socket), "WATCHDOG=1");
    }

    #[test]
    fn watchdog_is_only_for_the_process_systemd_named() {
        let (_dir, _socket, path) = listener();
        let me = std::process::id().to_string();
        let other = (std::process::id() + 1).to_string();
        assert_eq!(
            Notifier::new(Some(&path), Some("4000000"), Some(&me)).watchdog_timeout(),
            Some(Duration::from_secs(4))
        );
        assert_eq!(
            Notifier::new(Some(&path), Some("4000000"), None).watchdog_timeout(),
            Some(Duration::from_secs(4))
        );
        assert_eq!(
            Notifier::new(Some(&path), Some("4000000"), Some(&other)).watchdog_timeout(),
            None
        );
        assert_eq!(
            Notifier::new(Some(&path), Some("0"), None).watchdog_timeout(),
            None
        );
    }

    #[test]
    fn a_missing_socket_is_an_error_naming_it() {
        let n = Notifier::new(Some("/nonexistent/bmo/notify.sock"), None, None);
        let e = n.ready("up").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/bmo/notify.sock"), "{e}");
        assert!(e.contains("READY=1"), "{e}");
    }

    #[tokio::test]
    async fn watchdog_pings_at_half_the_timeout() {
        let (_dir, socket, path) = listener();
        let n = Notifier::new(Some(&path), Some("200000"), None);
        let task = n.spawn_watchdog().expect("watchdog set");
        let socket = tokio::net::UnixDatagram::from_std({
            socket.set_nonblocking(true).unwrap();
            socket
        })
        .unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
                .await
                .expect("a ping within 5 s")
                .unwrap();
            assert_eq!(&buf[..n], b"WATCHDOG=1");
        }
        task.abort();
    }
}
