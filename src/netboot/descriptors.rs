//! File descriptors: bmo raises its soft `RLIMIT_NOFILE` to the hard limit at start,
//! and the caps of every listener (HTTP boot, TFTP, health and metrics) are derived
//! from that limit, so that connections held open by clients never use up the
//! descriptors that Kubernetes, Ironic and files need.

use std::time::Duration;

use super::config::NetbootConfig;
use super::http_server::HttpLimits;

/// Descriptors kept out of every listener's reach: Kubernetes watches and requests,
/// Ironic connections, the lease file, logs, the runtime's own (epoll, eventfd,
/// signals), the DHCP sockets.
pub const RESERVE: usize = 256;

/// Descriptors one connection or session may hold: its socket, and a file it serves
/// (HTTP boot and TFTP); the health listener serves no files.
const PER_BOOT_CONNECTION: usize = 2;
const PER_HEALTH_CONNECTION: usize = 1;

/// The fewest of each kind a listener keeps however low the limit: below these bmo
/// still starts, and logs that the limit is too low.
const FLOOR: Cap = Cap {
    total: 8,
    per_client: 2,
};

/// Connections of the health and metrics listener (`/healthz`, `/readyz`,
/// `/metrics`): probes and scrapers come from few addresses and ask quickly.
pub const HEALTH: Cap = Cap {
    total: 128,
    per_client: 16,
};
/// Time the health listener gives a client to send its request header.
pub const HEALTH_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Time without a byte read or written after which a health connection is closed.
pub const HEALTH_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A listener's caps: open connections (or TFTP sessions) in total and per client IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub total: usize,
    pub per_client: usize,
}

impl Cap {
    /// `self` scaled by `num / den` (never above itself, never below the floor),
    /// the per-client cap no larger than the total.
    fn scaled(self, num: usize, den: usize) -> Cap {
        let total = (self.total.saturating_mul(num) / den.max(1))
            .clamp(FLOOR.total.min(self.total), self.total);
        let per_client = self.per_client.min(total).max(FLOOR.per_client.min(total));
        Cap { total, per_client }
    }
}

/// What the settings ask for, and what fits in the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The soft descriptor limit the caps were derived from.
    pub limit: usize,
    pub http: Cap,
    pub tftp: Cap,
    pub health: Cap,
    /// Whether the caps asked for were lowered to fit.
    pub lowered: bool,
}

impl Caps {
    /// Descriptors all listeners may hold at most.
    pub fn listeners_at_most(&self) -> usize {
        (self.http.total + self.tftp.total) * PER_BOOT_CONNECTION
            + self.health.total * PER_HEALTH_CONNECTION
    }
}

/// The caps for `limit` descriptors: what is asked for when it fits beside
/// [`RESERVE`], else each listener lowered in the same proportion. `http` and
/// `tftp` are `None` when that service is off.
pub fn derive(limit: usize, http: Option<Cap>, tftp: Option<Cap>, health: Cap) -> Caps {
    let none = Cap {
        total: 0,
        per_client: 0,
    };
    let (http, tftp) = (http.unwrap_or(none), tftp.unwrap_or(none));
    let wanted = Caps {
        limit,
        http,
        tftp,
        health,
        lowered: false,
    };
    let need = wanted.listeners_at_most();
    let room = limit.saturating_sub(RESERVE);
    if need <= room {
        return wanted;
    }
    let scale = |c: Cap| {
        if c.total == 0 {
            c
        } else {
            c.scaled(room, need)
        }
    };
    Caps {
        limit,
        http: scale(http),
        tftp: scale(tftp),
        health: scale(health),
        lowered: true,
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit in
/// force afterwards (unchanged if raising fails, as under a seccomp filter that
/// forbids it: systemd's `LimitNOFILE=` sets both then).
pub fn raise_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the valid struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot read the descriptor limit; assuming 1024");
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the valid struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                soft = limit.rlim_cur,
                hard = limit.rlim_max,
                "cannot raise the soft descriptor limit to the hard one"
            );
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// `cfg` with its HTTP and TFTP caps lowered to fit `limit` descriptors, and the
/// caps of every listener.
pub fn fit(cfg: &NetbootConfig, limit: usize) -> (NetbootConfig, Caps) {
    let cap = |total: u32, per_client: u32| Cap {
        total: total as usize,
        per_client: per_client as usize,
    };
    let http = cap(
        cfg.http_max_connections,
        cfg.http_max_connections_per_client,
    );
    let tftp = cap(cfg.tftp_max_sessions, cfg.tftp_max_sessions_per_client);
    let caps = derive(
        limit,
        cfg.http.then_some(http),
        cfg.tftp.then_some(tftp),
        HEALTH,
    );
    let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let mut fitted = cfg.clone();
    if cfg.http {
        fitted.http_max_connections = narrow(caps.http.total);
        fitted.http_max_connections_per_client = narrow(caps.http.per_client);
    }
    if cfg.tftp {
        fitted.tftp_max_sessions = narrow(caps.tftp.total);
        fitted.tftp_max_sessions_per_client = narrow(caps.tftp.per_client);
    }
    if caps.lowered {
        tracing::warn!(
            limit,
            reserve = RESERVE,
            http = caps.http.total,
            tftp = caps.tftp.total,
            health = caps.health.total,
            "descriptor limit too low for the connection caps asked for; caps lowered to fit (raise bmo's descriptor limit or lower the caps: docs/install.md, \"Descriptor limit\")"
        );
    } else {
        tracing::info!(
            limit,
            http = caps.http.total,
            tftp = caps.tftp.total,
            health = caps.health.total,
            "connection caps fit the descriptor limit"
        );
    }
    (fitted, caps)
}

/// The health listener's limits under `cap`.
pub fn health_limits(cap: Cap) -> HttpLimits {
    HttpLimits {
        header_timeout: HEALTH_HEADER_TIMEOUT,
        idle_timeout: HEALTH_IDLE_TIMEOUT,
        max_connections: cap.total,
        max_connections_per_client: cap.per_client,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: Cap = Cap {
        total: 1024,
        per_client: 32,
    };
    const TFTP: Cap = Cap {
        total: 64,
        per_client: 4,
    };

    #[test]
    fn a_generous_limit_keeps_every_cap_asked_for() {
        let caps = derive(65536, Some(HTTP), Some(TFTP), HEALTH);
        assert_eq!((caps.http, caps.tftp, caps.health), (HTTP, TFTP, HEALTH));
        assert!(!caps.lowered);
    }

    #[test]
    fn under_1024_every_listener_is_lowered_to_fit_beside_the_reserve() {
        let caps = derive(1024, Some(HTTP), Some(TFTP), HEALTH);
        assert!(caps.lowered);
        assert!(caps.listeners_at_most() + RESERVE <= 1024, "{caps:?}");
        assert_eq!(caps.http.total, 341);
        assert_eq!(caps.tftp.total, 21);
        assert_eq!(caps.health.total, 42);
        assert_eq!(caps.http.per_client, 32);
        assert_eq!(caps.health.per_client, 16);
    }

    #[test]
    fn a_service_that_is_off_leaves_its_share_to_the_others() {
        let caps = derive(1024, Some(HTTP), None, HEALTH);
        assert_eq!(caps.tftp.total, 0);
        assert!(caps.http.total > 341);
        assert!(caps.listeners_at_most() + RESERVE <= 1024, "{caps:?}");
    }

    #[test]
    fn a_tiny_limit_keeps_the_floor() {
        let caps = derive(100, Some(HTTP), Some(TFTP), HEALTH);
        for cap in [caps.http, caps.tftp, caps.health] {
            assert_eq!(cap.total, FLOOR.total, "{caps:?}");
            assert!(
                (FLOOR.per_client..=FLOOR.total).contains(&cap.per_client),
                "{caps:?}"
            );
        }
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_limit();
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the valid struct it is given.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(now.rlim_cur, now.rlim_max);
        assert_eq!(limit as u64, now.rlim_cur);
    }
}
