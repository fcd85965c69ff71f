//! The recent boot activity of each client on the provisioning network: its DHCP
//! exchanges and the files it fetched over TFTP and HTTP, for the boot activity page
//! (`crate::activity`).
//!
//! Bounded whatever the traffic: the last [`EVENTS_PER_CLIENT`] events of each of at
//! most [`CLIENTS`] clients; when full, an eighth of them makes room: first those that
//! never got further than asking (a flood of DISCOVERs from made-up MACs), heard from
//! longest ago, so a machine that really booted keeps its timeline through a flood.
//! Nothing in it comes from a Secret: file paths, addresses, message types and
//! sizes only.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::leases::LeaseTable;
use super::mac::MacAddr;

/// Events kept per client.
pub const EVENTS_PER_CLIENT: usize = 32;

/// Clients kept.
pub const CLIENTS: usize = 1024;

/// Who booted: its MAC once DHCP has seen it, else the address it fetched from (a
/// client bmo gave no address, as in proxy mode or on a site without DHCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Client {
    Mac(MacAddr),
    Address(IpAddr),
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::Mac(mac) => mac.fmt(f),
            Client::Address(ip) => ip.fmt(f),
        }
    }
}

/// One step of a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BootStep {
    /// A DHCP request and bmo's answer (`None`: not answered).
    Dhcp {
        request: String,
        reply: Option<String>,
        address: Option<IpAddr>,
        boot_file: Option<String>,
    },
    /// A file sent over TFTP; `outcome` is `sent` or why it was not.
    Tftp {
        file: String,
        bytes: u64,
        millis: u64,
        outcome: String,
    },
    /// An HTTP request; `bytes` were sent of the body, `complete` when all of it.
    Http {
        path: String,
        status: u16,
        bytes: u64,
        millis: u64,
        complete: bool,
    },
}

/// A step and when it ended (Unix milliseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootEvent {
    pub at_unix_ms: u64,
    #[serde(flatten)]
    pub step: BootStep,
}

/// One client's recent events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    pub client: Client,
    pub events: Vec<BootEvent>,
}

#[derive(Default)]
struct Log {
    clients: HashMap<Client, Recent>,
    totals: Totals,
}

/// A client's last events, and whether it ever got further than asking.
#[derive(Default)]
struct Recent {
    events: VecDeque<BootEvent>,
    progressed: bool,
}

impl BootStep {
    /// An address acknowledged or a file fetched: a client that really boots, unlike
    /// one that only ever asks.
    fn progresses(&self) -> bool {
        match self {
            BootStep::Dhcp { reply, .. } => {
                matches!(reply.as_deref(), Some("ACK" | "REPLY"))
            }
            BootStep::Tftp { .. } | BootStep::Http { .. } => true,
        }
    }
}

/// Counts of every step recorded since start, for `/metrics`; unlike the timelines
/// they never drop anything. Keys come from bounded sets (message types, outcomes,
/// status classes), never from file names or addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// (request, reply or `none`) → exchanges.
    pub dhcp: BTreeMap<(String, String), u64>,
    /// `sent` or `failed` → (transfers, bytes sent).
    pub tftp: BTreeMap<&'static str, (u64, u64)>,
    /// (status class such as `2xx`, whole body sent) → (responses, bytes sent).
    pub http: BTreeMap<(String, bool), (u64, u64)>,
}

impl Totals {
    fn add(&mut self, step: &BootStep) {
        match step {
            BootStep::Dhcp { request, reply, .. } => {
                let reply = reply.clone().unwrap_or_else(|| "none".to_owned());
                *self.dhcp.entry((request.clone(), reply)).or_default() += 1;
            }
            BootStep::Tftp { bytes, outcome, .. } => {
                let outcome = if outcome == "sent" { "sent" } else { "failed" };
                let total = self.tftp.entry(outcome).or_default();
                *total = (total.0 + 1, total.1.saturating_add(*bytes));
            }
            BootStep::Http {
                status,
                bytes,
                complete,
                ..
            } => {
                let key = (format!("{}xx", status / 100), *complete);
                let total = self.http.entry(key).or_default();
                *total = (total.0 + 1, total.1.saturating_add(*bytes));
            }
        }
    }
}

impl Log {
    /// Drops an eighth of the clients, those that never progressed first, each group
    /// heard from longest ago first: in batches, so a flood of new clients costs one
    /// sort per batch, not a scan per packet.
    fn make_room(&mut self) {
        let mut last_heard: Vec<(bool, u64, Client)> = self
            .clients
            .iter()
            .map(|(client, recent)| {
                let at = recent.events.back().map_or(0, |e| e.at_unix_ms);
                (recent.progressed, at, *client)
            })
            .collect();
        last_heard.sort_unstable();
        for (_, _, client) in last_heard.into_iter().take(CLIENTS / 8) {
            self.clients.remove(&client);
        }
    }
}

/// The boot log, shared by the DHCP, TFTP and HTTP servers and read by the page.
/// Clones share one log.
#[derive(Clone, Default)]
pub struct BootLog {
    log: Arc<Mutex<Log>>,
    /// Maps a fetching client's address to its MAC.
    leases: Option<LeaseTable>,
}

impl BootLog {
    /// A log that names clients fetching by address by the MAC `leases` holds for it.
    pub fn new(leases: LeaseTable) -> Self {
        Self {
            log: Arc::default(),
            leases: Some(leases),
        }
    }

    /// Records a DHCP exchange of `mac`.
    pub fn dhcp(&self, mac: MacAddr, step: BootStep) {
        self.push(Client::Mac(mac), step);
    }

    /// Records a transfer to the client at `ip` (named by its MAC when a lease says it).
    pub fn transfer(&self, ip: IpAddr, step: BootStep) {
        let ip = ip.to_canonical();
        let mac = match (&self.leases, ip) {
            (Some(leases), IpAddr::V4(v4)) => leases.mac_of(v4),
            (Some(leases), IpAddr::V6(v6)) => leases.mac_of_v6(v6),
            _ => None,
        };
        self.push(mac.map_or(Client::Address(ip), Client::Mac), step);
    }

    fn push(&self, client: Client, step: BootStep) {
        let event = BootEvent {
            at_unix_ms: now_ms(),
            step,
        };
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.totals.add(&event.step);
        if !log.clients.contains_key(&client) && log.clients.len() >= CLIENTS {
            log.make_room();
        }
        let recent = log.clients.entry(client).or_default();
        recent.progressed |= event.step.progresses();
        if recent.events.len() >= EVENTS_PER_CLIENT {
            recent.events.pop_front();
        }
        recent.events.push_back(event);
    }

    /// What has been recorded since start, counted.
    pub fn totals(&self) -> Totals {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .totals
            .clone()
    }

    /// Every client's timeline, the one heard from last first.
    pub fn timelines(&self) -> Vec<Timeline> {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let mut timelines: Vec<Timeline> = log
            .clients
            .iter()
            .map(|(client, recent)| Timeline {
                client: *client,
                events: recent.events.iter().cloned().collect(),
            })
            .collect();
        timelines.sort_by_key(|t| std::cmp::Reverse(t.events.last().map(|e| e.at_unix_ms)));
        timelines
    }
}

/// Milliseconds of `elapsed`, saturating.
pub fn millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tftp(file: &str) -> BootStep {
        BootStep::Tftp {
            file: file.into(),
            bytes: 1,
            millis: 1,
            outcome: "sent".into(),
        }
    }

    /// A log in which one client fetched five files more than it keeps.
    fn log_of_one_busy_client() -> (BootLog, MacAddr) {
        let log = BootLog::default();
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        for i in 0..EVENTS_PER_CLIENT + 5 {
            log.dhcp(mac, tftp(&format!("f{i}")));
        }
        (log, mac)
    }

    fn discover(reply: Option<&str>) -> BootStep {
        BootStep::Dhcp {
            request: "DISCOVER".into(),
            reply: reply.map(str::to_owned),
            address: None,
            boot_file: None,
        }
    }

    #[test]
    fn each_client_keeps_its_last_events_only() {
        let (log, _) = log_of_one_busy_client();
        let timelines = log.timelines();
        assert_eq!(timelines.len(), 1);
        let events = &timelines[0].events;
        assert_eq!(events.len(), EVENTS_PER_CLIENT);
        assert_eq!(events[0].step, tftp("f5"), "the oldest went first");
    }

    #[test]
    fn totals_count_every_step_by_kind_and_outcome() {
        let (log, mac) = log_of_one_busy_client();
        log.dhcp(
            mac,
            BootStep::Tftp {
                file: "missing.efi".into(),
                bytes: 0,
                millis: 1,
                outcome: "file not found".into(),
            },
        );
        log.dhcp(mac, discover(None));
        let ip = IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
        let http = |status, complete| BootStep::Http {
            path: "/images/a.iso".into(),
            status,
            bytes: 10,
            millis: 1,
            complete,
        };
        log.transfer(ip, http(200, true));
        log.transfer(ip, http(200, false));
        log.transfer(ip, http(404, true));
        let totals = log.totals();
        let sent = EVENTS_PER_CLIENT as u64 + 5;
        assert_eq!(totals.tftp.get("sent"), Some(&(sent, sent)));
        assert_eq!(totals.tftp.get("failed"), Some(&(1, 0)));
        let key = |r: &str, a: &str| (r.to_owned(), a.to_owned());
        assert_eq!(totals.dhcp.get(&key("DISCOVER", "none")), Some(&1));
        assert_eq!(totals.http.get(&("2xx".to_owned(), true)), Some(&(1, 10)));
        assert_eq!(totals.http.get(&("2xx".to_owned(), false)), Some(&(1, 10)));
        assert_eq!(totals.http.get(&("4xx".to_owned(), true)), Some(&(1, 10)));
    }

    #[test]
    fn a_flood_of_clients_keeps_the_log_bounded_and_the_latest_client() {
        let log = BootLog::default();
        for i in 0..CLIENTS as u32 + 100 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            log.transfer(ip, tftp("undionly.kpxe"));
        }
        let timelines = log.timelines();
        assert!(timelines.len() <= CLIENTS, "{}", timelines.len());
        let last = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + CLIENTS as u32 + 99));
        assert!(timelines.iter().any(|t| t.client == Client::Address(last)));
    }

    #[test]
    fn a_flood_of_clients_that_only_ask_does_not_push_out_one_that_booted() {
        let log = BootLog::default();
        let booted = MacAddr([2, 0, 0, 0, 0, 1]);
        log.dhcp(booted, tftp("snponly.efi"));
        for i in 0..CLIENTS as u32 * 4 {
            let [_, a, b, c] = i.to_be_bytes();
            log.dhcp(MacAddr([6, 0, 0, a, b, c]), discover(Some("OFFER")));
        }
        let timelines = log.timelines();
        assert!(timelines.len() <= CLIENTS, "{}", timelines.len());
        assert!(timelines.iter().any(|t| t.client == Client::Mac(booted)));
    }

    #[test]
    fn a_fetch_from_a_leased_address_is_the_mac_s() {
        let leases = LeaseTable::in_memory();
        let mac = MacAddr([2, 0, 0, 0, 0, 9]);
        let ip = std::net::Ipv4Addr::new(172, 22, 0, 50);
        leases.see(mac, Default::default(), false);
        leases.assign(mac, ip, crate::netboot::leases::LeaseState::Bound, 60);
        let log = BootLog::new(leases);
        log.transfer(IpAddr::V4(ip), tftp("snponly.efi"));
        log.transfer("172.22.0.51".parse().unwrap(), tftp("snponly.efi"));
        let clients: Vec<Client> = log.timelines().iter().map(|t| t.client).collect();
        assert!(clients.contains(&Client::Mac(mac)), "{clients:?}");
        assert!(clients.contains(&Client::Address("172.22.0.51".parse().unwrap())));
    }
}
