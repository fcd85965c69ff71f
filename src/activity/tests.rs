use serde_json::json;

use super::page::{escape, render};
use super::snapshot::{self, Snapshot};
use crate::api::BareMetalHost;
use crate::netboot::boot_log::{BootLog, BootStep};
use crate::netboot::mac::MacAddr;

fn host(name: &str, address: &str, status: serde_json::Value) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "site"},
        "spec": {"online": true, "bootMACAddress": "52:54:00:00:00:01",
                 "bmc": {"address": address, "credentialsName": "c"}},
        "status": status,
    }))
    .expect("host")
}

fn status(state: &str, error: Option<(&str, &str)>) -> serde_json::Value {
    let mut status = json!({
        "operationalStatus": "OK", "errorMessage": "", "poweredOn": false,
        "errorCount": 0, "provisioningFailCount": 0,
        "provisioning": {"state": state, "ID": ""},
        "operationHistory": {"register": {"start": "2026-12-06T10:00:00Z", "end": "2026-12-06T10:00:05Z"}},
    });
    if let Some((kind, message)) = error {
        status["operationalStatus"] = json!("error");
        status["errorType"] = json!(kind);
        status["errorMessage"] = json!(message);
    }
    status
}

fn snapshot_of(hosts: &[BareMetalHost], log: &BootLog) -> Snapshot {
    let (rows, states) = snapshot::hosts(hosts);
    Snapshot {
        states,
        timelines: snapshot::named(log.timelines(), &rows),
        hosts: rows,
        ..Snapshot::default()
    }
}

#[test]
fn the_page_counts_states_names_timelines_by_host_and_hides_bmc_credentials() {
    let hosts = [
        host(
            "a",
            "redfish://admin:s3cret@10.0.0.5/redfish/v1/Systems/1",
            status("available", None),
        ),
        host("b", "ipmi://10.0.0.6", status("available", None)),
        host(
            "c",
            "ipmi://10.0.0.7",
            status(
                "registering",
                Some(("registration error", "BMC <10.0.0.7> refused")),
            ),
        ),
    ];
    let log = BootLog::default();
    log.dhcp(
        MacAddr([0x52, 0x54, 0, 0, 0, 1]),
        BootStep::Dhcp {
            request: "DISCOVER".into(),
            reply: Some("OFFER".into()),
            address: Some("172.22.0.10".parse().unwrap()),
            boot_file: Some("snponly.efi".into()),
        },
    );
    let snapshot = snapshot_of(&hosts, &log);
    assert_eq!(snapshot.states.get("available"), Some(&2));
    assert_eq!(snapshot.states.get("registering"), Some(&1));
    assert_eq!(
        snapshot.timelines[0].host.as_deref(),
        Some("site/c"),
        "the last host with that MAC"
    );
    let html = render(&snapshot);
    assert!(
        !html.contains("s3cret") && !html.contains("admin"),
        "{html}"
    );
    assert!(html.contains("redfish://***@10.0.0.5"), "{html}");
    assert!(
        html.contains("BMC &lt;10.0.0.7&gt; refused"),
        "escaped: {html}"
    );
    assert!(html.contains("DISCOVER → OFFER, address 172.22.0.10, boot file snponly.efi"));
    assert!(html.contains("register 2026-12-06T10:00:00Z → 2026-12-06T10:00:05Z"));
}

#[test]
fn escape_covers_text_and_attributes() {
    assert_eq!(
        escape(r#"<a href="x">'&'</a>"#),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
}
