//! DHCP facts added to inspected hardware details: what bmo's DHCP server learned
//! about a host's NICs (pure; the controller hands in the lease table's lookup).

use crate::api;
use crate::netboot::leases::{Lease, LeaseState};
use crate::netboot::mac::MacAddr;

/// Adds what bmo's DHCP server knows to inspected NICs: each NIC whose MAC has a lease
/// gets the hostname its DHCP client sent (`dhcpHostname`, if a valid host name) and,
/// when inspection saw no address on it, the address bmo leased it. MACs are compared
/// as addresses, so letter case and `-` separators do not matter. A lease without a
/// hostname leaves an earlier `dhcpHostname` in place, unless that is no valid host
/// name (written before bmo dropped those, issue 36): it goes. Returns whether
/// anything changed.
pub fn add(
    details: &mut api::HardwareDetails,
    lease_of: impl Fn(&MacAddr) -> Option<Lease>,
) -> bool {
    let mut changed = false;
    for nic in &mut details.nics {
        if nic
            .dhcp_hostname
            .as_deref()
            .is_some_and(|h| !crate::netboot::hostname::is_valid(h.as_bytes()))
        {
            nic.dhcp_hostname = None;
            changed = true;
        }
        let Some(lease) = nic
            .mac
            .as_deref()
            .and_then(|m| m.parse::<MacAddr>().ok())
            .and_then(|m| lease_of(&m))
        else {
            continue;
        };
        if let Some(hostname) = lease
            .hostname_lossy()
            .filter(|h| crate::netboot::hostname::is_valid(h.as_bytes()))
            && nic.dhcp_hostname.as_deref() != Some(hostname.as_str())
        {
            nic.dhcp_hostname = Some(hostname);
            changed = true;
        }
        if nic.ip.as_deref().is_none_or(str::is_empty)
            && lease.state == LeaseState::Bound
            && let Some(ip) = lease
                .ip
                .map(std::net::IpAddr::V4)
                .or(lease.ip6.map(std::net::IpAddr::V6))
        {
            nic.ip = Some(ip.to_string());
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(mac: &str, ip: Option<&str>, state: LeaseState, hostname: Option<&[u8]>) -> Lease {
        Lease {
            ip: ip.map(|i| i.parse().unwrap()),
            hostname_raw: hostname.map(<[u8]>::to_vec),
            ..Lease::new(mac.parse().unwrap(), state, 0)
        }
    }

    fn nic(mac: &str, ip: Option<&str>) -> api::Nic {
        api::Nic {
            name: Some("eno1".into()),
            mac: Some(mac.into()),
            ip: ip.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn nics_get_the_hostname_and_address_of_their_lease() {
        let table = [
            lease(
                "52:54:00:aa:bb:01",
                Some("10.77.0.50"),
                LeaseState::Bound,
                Some(b"node-a"),
            ),
            lease(
                "52:54:00:aa:bb:02",
                Some("10.77.0.51"),
                LeaseState::Bound,
                Some(b"worker-2"),
            ),
            lease(
                "52:54:00:aa:bb:03",
                Some("10.77.0.52"),
                LeaseState::Released,
                None,
            ),
        ];
        let lookup = |m: &MacAddr| table.iter().find(|l| l.mac == *m).cloned();
        let mut details = api::HardwareDetails {
            nics: vec![
                // Inspection reports upper case; the lease table has lower case.
                nic("52:54:00:AA:BB:01", None),
                nic("52:54:00:aa:bb:02", Some("192.0.2.7")),
                nic("52:54:00:aa:bb:03", None),
                nic("52:54:00:aa:bb:04", None),
                nic("not a mac", None),
            ],
            ..Default::default()
        };
        assert!(add(&mut details, lookup));
        let got: Vec<(Option<&str>, Option<&str>)> = details
            .nics
            .iter()
            .map(|n| (n.dhcp_hostname.as_deref(), n.ip.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (Some("node-a"), Some("10.77.0.50")),
                // Inspection's own address wins over the lease.
                (Some("worker-2"), Some("192.0.2.7")),
                // A released lease gives no address.
                (None, None),
                (None, None),
                (None, None),
            ]
        );
        assert!(!add(&mut details, lookup), "a second pass changes nothing");
        let json = serde_json::to_value(&details.nics[0]).unwrap();
        assert_eq!(json["dhcpHostname"], "node-a");
        assert!(
            serde_json::to_value(&details.nics[3])
                .unwrap()
                .get("dhcpHostname")
                .is_none()
        );
    }

    #[test]
    fn a_lease_without_hostname_keeps_the_one_seen_before() {
        let mut details = api::HardwareDetails {
            nics: vec![api::Nic {
                dhcp_hostname: Some("earlier".into()),
                ..nic("52:54:00:aa:bb:01", Some("10.77.0.50"))
            }],
            ..Default::default()
        };
        let l = lease(
            "52:54:00:aa:bb:01",
            Some("10.77.0.50"),
            LeaseState::Bound,
            None,
        );
        assert!(!add(&mut details, |_| Some(l.clone())));
        assert_eq!(details.nics[0].dhcp_hostname.as_deref(), Some("earlier"));
    }

    #[test]
    fn an_earlier_dhcp_hostname_that_is_no_host_name_goes() {
        let mut details = api::HardwareDetails {
            nics: vec![api::Nic {
                dhcp_hostname: Some("evil\u{1b}[31m\n".into()),
                ..nic("52:54:00:aa:bb:01", None)
            }],
            ..Default::default()
        };
        assert!(add(&mut details, |_| None));
        assert_eq!(details.nics[0].dhcp_hostname, None);
    }
}
