//! The lease table reaching BareMetalHosts: dhclient and busybox udhcpc get leases
//! from bmo's DHCP server (server and clients in network namespaces the test makes),
//! the hostnames they sent show in `status.hardware.nics[].dhcpHostname` after an
//! inspection through the stack's Ironic, and survive a restart of the DHCP server;
//! discovery turns an unknown MAC into exactly one BareMetalHost, never twice.
//!
//! The controller runs in this process on loopback with the stack (kube-apiserver,
//! Ironic); only the DHCP server runs inside the server namespace, on its own thread.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bmo::api::{BareMetalHost, HardwareData, OperationalStatus, ProvisioningState};
use bmo::controller::discovery::{self, DiscoverySettings};
use bmo::controller::host::{Context, ControllerSettings};
use bmo::ironic::NodeCreate;
use bmo::netboot::config::{DhcpIgnore, DhcpMode, NetbootConfig};
use bmo::netboot::hosts::HostDirectory;
use bmo::netboot::leases::{LeaseState, LeaseTable};
use bmo::netboot::mac::MacAddr;
use bmo::provisioner::{DeployRamdisk, IronicProvisioner, ProvisionerSettings};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::netboot::{self, ChildGuard, NsRef, TempDir, TestNet, require, run, spawn};
use crate::support::{Stack, eventually, unique_mac, unique_name};

// ------------------------------------------------------------------ the network

/// `TestNet` plus a second client interface `cli1` (bridged with `srv0` on the
/// server side as `br0`, which holds 10.77.0.1), with the given MACs.
fn two_client_net(mac0: &MacAddr, mac1: &MacAddr) -> TestNet {
    let net = TestNet::new(false);
    let (s, c) = (net.server.name.clone(), net.client.name.clone());
    let ip = |args: &[&str]| run(Command::new("ip").args(args));
    ip(&[
        "-n", &s, "link", "add", "srv1", "type", "veth", "peer", "name", "cli1", "netns", &c,
    ]);
    ip(&["-n", &s, "link", "add", "br0", "type", "bridge"]);
    for l in ["srv0", "srv1"] {
        ip(&["-n", &s, "link", "set", l, "master", "br0"]);
        ip(&["-n", &s, "link", "set", l, "up"]);
    }
    ip(&["-n", &s, "addr", "flush", "dev", "srv0"]);
    ip(&["-n", &s, "addr", "add", "10.77.0.1/24", "dev", "br0"]);
    ip(&["-n", &s, "link", "set", "br0", "up"]);
    set_mac(&net, "cli0", mac0);
    set_mac(&net, "cli1", mac1);
    net
}

fn set_mac(net: &TestNet, iface: &str, mac: &MacAddr) {
    let c = net.client.name.as_str();
    let ip = |args: &[&str]| run(Command::new("ip").args(args));
    ip(&["-n", c, "link", "set", iface, "down"]);
    ip(&["-n", c, "link", "set", iface, "address", &mac.to_string()]);
    ip(&["-n", c, "link", "set", iface, "up"]);
}

fn dhcp_config(dir: &Path, interface: &str) -> NetbootConfig {
    let mut cfg = netboot::config(dir);
    cfg.provisioning.provisioning_interface = Some(interface.into());
    cfg.http = false;
    cfg.dhcp_mode = DhcpMode::Full;
    cfg.dhcp_range = Some("10.77.0.50,10.77.0.60".parse().unwrap());
    cfg
}

/// bmo's DHCP server on a thread inside the server namespace; stopped (and its
/// lease table flushed to disk) on drop.
struct DhcpServer {
    /// The server's known hosts, for the host controller to attach its hosts to.
    known_hosts: HostDirectory,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DhcpServer {
    fn start(ns: NsRef, cfg: NetbootConfig, leases: LeaseTable) -> DhcpServer {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<HostDirectory, String>>();
        let thread = std::thread::spawn(move || {
            ns.enter();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let nb = match bmo::netboot::start(&cfg, leases).await {
                    Ok(nb) => nb,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(nb.known_hosts.clone()));
                let _ = stopped.await;
                nb.shutdown().await.expect("lease table saved at shutdown");
            });
        });
        let ready = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("DHCP server thread answers");
        let known_hosts = ready.expect("DHCP server starts in the server namespace");
        DhcpServer {
            known_hosts,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the server and waits until its leases are on disk.
    fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("DHCP server thread");
        }
    }
}

impl Drop for DhcpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// dhclient on `iface` sending `hostname` (any bytes) as option 12; keeps running.
fn dhclient(ns: &NsRef, dir: &Path, iface: &str, hostname: &[u8]) -> ChildGuard {
    let conf = dir.join(format!("dhclient-{iface}.conf"));
    let hex: Vec<String> = hostname.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(
        &conf,
        format!(
            "option raw-host-name code 12 = string;\nsend raw-host-name {};\n",
            hex.join(":")
        ),
    )
    .expect("dhclient.conf");
    let path = |name: &str| dir.join(name).display().to_string();
    spawn(ns.command("dhclient").args([
        "-d",
        "-1",
        "-v",
        "-cf",
        &path(&format!("dhclient-{iface}.conf")),
        "-lf",
        &path(&format!("dhclient-{iface}.leases")),
        "-pf",
        &path(&format!("dhclient-{iface}.pid")),
        "-sf",
        "/bin/true",
        iface,
    ]))
}

/// One busybox udhcpc exchange on `iface` sending `hostname`; panics unless it got
/// a lease.
async fn udhcpc(ns: &NsRef, iface: &str, hostname: &str) {
    if let Err(out) = try_udhcpc(ns, iface, hostname, 5, 2).await {
        panic!("udhcpc on {iface} got no lease: {out}");
    }
}

/// One busybox udhcpc exchange on `iface` sending `hostname`, with `tries`
/// DISCOVERs `pause_secs` apart; its output when it got no lease.
async fn try_udhcpc(
    ns: &NsRef,
    iface: &str,
    hostname: &str,
    tries: u32,
    pause_secs: u32,
) -> Result<(), String> {
    let out = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "busybox",
            "udhcpc",
            "-f",
            "-q",
            "-n",
            "-t",
            &tries.to_string(),
            "-T",
            &pause_secs.to_string(),
            "-i",
            iface,
            "-s",
            "/bin/true",
            "-x",
            &format!("hostname:{hostname}"),
        ])
        .output()
        .await
        .expect("run udhcpc");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

async fn bound_lease(leases: &LeaseTable, mac: &MacAddr) -> bmo::netboot::leases::Lease {
    eventually(
        &format!("a bound lease for {mac}"),
        Duration::from_secs(30),
        || async {
            leases
                .get(mac)
                .filter(|l| l.state == LeaseState::Bound)
                .ok_or_else(|| format!("{:?}", leases.get(mac)))
        },
    )
    .await
}

fn parse_mac(s: &str) -> MacAddr {
    s.parse().expect("test MAC")
}

// ------------------------------------------------------------------ the cluster

/// A fresh namespace and the host controller (in this process, against the stack's
/// kube-apiserver and Ironic) watching it with the given lease table.
struct Site {
    ns: String,
    client: kube::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    controller: Option<tokio::task::JoinHandle<()>>,
}

impl Site {
    async fn start(prefix: &str, leases: LeaseTable) -> Site {
        Self::start_knowing(prefix, leases, None).await
    }

    /// Like [`Site::start`]; with `known_hosts`, the controller makes its hosts known
    /// to that DHCP server.
    async fn start_knowing(
        prefix: &str,
        leases: LeaseTable,
        known_hosts: Option<HostDirectory>,
    ) -> Site {
        let stack = Stack::get();
        let client = stack.kube_client().await;
        bmo::api::install::install(&client, Duration::from_secs(60))
            .await
            .expect("install CRDs");
        let ns = unique_name(prefix);
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(ns.clone());
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create namespace");
        let provisioner = IronicProvisioner::new(
            stack.ironic().await,
            ProvisionerSettings {
                short_delay: Duration::from_millis(200),
                long_delay: Duration::from_millis(500),
                ..ProvisionerSettings::default()
            },
        );
        let settings = ControllerSettings {
            namespace: Some(ns.clone()),
            concurrency: 4,
            provisioning_limit: 20,
            max_backoff: Duration::from_secs(5),
            steady_poll: bmo::controller::host::state_machine::STEADY_POLL,
            start_settle: Duration::ZERO,
            deploy_ramdisk: DeployRamdisk {
                kernel_url: stack.var("DEPLOY_KERNEL_URL").map(str::to_owned),
                ramdisk_url: stack.var("DEPLOY_RAMDISK_URL").map(str::to_owned),
                ..Default::default()
            },
        };
        let mut ctx = Context::new(client.clone(), provisioner, settings).with_leases(leases);
        if let Some(hosts) = known_hosts {
            ctx = ctx.with_known_hosts(hosts);
        }
        let ctx = Arc::new(ctx);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let controller = tokio::spawn(bmo::controller::host::run(ctx, async move {
            let _ = stopped.await;
        }));
        Site {
            ns,
            client,
            stop: Some(stop),
            controller: Some(controller),
        }
    }

    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn names(&self) -> BTreeSet<String> {
        self.hosts()
            .list(&ListParams::default())
            .await
            .expect("list hosts")
            .items
            .iter()
            .map(|h| h.name_any())
            .collect()
    }

    async fn create_host(&self, manifest: serde_json::Value) {
        let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        self.hosts()
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }

    async fn delete_host(&self, name: &str) {
        let hosts = self.hosts();
        hosts
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete host");
        eventually(
            &format!("{name} to be gone"),
            Duration::from_secs(60),
            || async {
                match hosts.get_opt(name).await {
                    Ok(None) => Ok(()),
                    Ok(Some(h)) => Err(format!("still there in {}", h.provisioning_state())),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(controller) = self.controller.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), controller).await;
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.abort();
        }
    }
}

/// An Ironic inventory as the inspection ramdisk would post it: two NICs with the
/// test's MACs (upper case, as some ramdisks write them); the first without an
/// IPv4 address, the second with one.
fn inventory(mac0: &MacAddr, mac1: &MacAddr) -> serde_json::Value {
    let upper = |m: &MacAddr| m.to_string().to_uppercase();
    json!({
        "inventory": {
            "interfaces": [
                {"name": "eno1", "mac_address": upper(mac0), "has_carrier": true,
                 "speed_mbps": 1000, "vendor": "0x8086", "product": "0x1533"},
                {"name": "eno2", "mac_address": upper(mac1), "ipv4_address": "192.0.2.9",
                 "has_carrier": true, "speed_mbps": 1000, "vendor": "0x8086", "product": "0x1533"}
            ],
            "cpu": {"model_name": "Test CPU", "frequency": "2000", "count": 4,
                    "architecture": "x86_64", "flags": ["aes"]},
            "disks": [{"name": "/dev/sda", "model": "disk", "size": 64424509440u64,
                       "rotational": false, "serial": "S1"}],
            "memory": {"total": 8589934592u64, "physical_mb": 8192},
            "system_vendor": {"product_name": "Test", "serial_number": "T1",
                              "manufacturer": "bmo"},
            "boot": {"current_boot_mode": "uefi", "pxe_interface": mac0.to_string()},
            "hostname": "inspected-os-name"
        },
        "root_disk": {"name": "/dev/sda", "size": 64424509440u64, "rotational": false}
    })
}

// ------------------------------------------------------------------ the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp_hostnames_of_a_hosts_nics_show_in_its_status_after_inspection() {
    let _shared = crate::support::shared();
    require(&["dhclient", "busybox", "ip"]);
    let (mac0, mac1) = (parse_mac(&unique_mac()), parse_mac(&unique_mac()));
    let net = two_client_net(&mac0, &mac1);
    let dir = TempDir::new("netboot-host");
    let cfg = dhcp_config(dir.path(), "br0");
    let lease_file = cfg.lease_file.clone();
    let leases = LeaseTable::open(&lease_file).expect("lease file");
    let server = DhcpServer::start(net.server.handle(), cfg.clone(), leases.clone());

    // dhclient sends no host name (an escape sequence, a newline, a byte that is not
    // UTF-8): bmo drops it. udhcpc sends a plain name.
    let _dhclient = dhclient(
        &net.client.handle(),
        dir.path(),
        "cli0",
        b"node\x1b[31m\n-\xff",
    );
    udhcpc(&net.client.handle(), "cli1", "udhcpc-node").await;
    let lease0 = bound_lease(&leases, &mac0).await;
    let lease1 = bound_lease(&leases, &mac1).await;
    assert_eq!(lease0.hostname, None);
    assert_eq!(lease1.hostname.as_deref(), Some("udhcpc-node"));
    let leased_ip = lease0.ip.expect("dhclient's address").to_string();

    // The host: fake-hardware with agent inspection, so that the test can post an
    // inventory the way the ramdisk would. Its Ironic node exists already (unnamed,
    // found by the boot MAC), set up for agent inspection.
    let site = Site::start("nb-host", leases.clone()).await;
    let ironic = Stack::get().ironic().await;
    let node = ironic
        .create_node(&NodeCreate {
            driver: "fake-hardware".into(),
            boot_interface: Some("ipxe".into()),
            deploy_interface: Some("fake".into()),
            inspect_interface: Some("agent".into()),
            ..Default::default()
        })
        .await
        .expect("create Ironic node");
    ironic
        .create_port(&node.uuid, &mac0.to_string())
        .await
        .expect("port for the boot MAC");
    let name = "pxe-host";
    let secrets: Api<Secret> = Api::namespaced(site.client.clone(), &site.ns);
    let mut secret = Secret::default();
    secret.metadata.name = Some(format!("{name}-bmc"));
    secret.data = Some(
        [
            ("username".to_owned(), ByteString(b"admin".to_vec())),
            ("password".to_owned(), ByteString(b"unused".to_vec())),
        ]
        .into(),
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create BMC secret");
    site.create_host(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": mac0.to_string(),
            "automatedCleaningMode": "disabled",
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        }
    }))
    .await;

    eventually(
        "the Ironic node to wait for the inspection ramdisk",
        Duration::from_secs(90),
        || async {
            let n = ironic
                .get_node(&node.uuid)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("node gone")?;
            match n.provision_state() {
                "inspect wait" => Ok(()),
                s => Err(format!("{s}, last_error {:?}", n.last_error)),
            }
        },
    )
    .await;
    ironic
        .continue_inspection(&inventory(&mac0, &mac1))
        .await
        .expect("Ironic accepts the inventory");

    let hosts = site.hosts();
    let host = eventually(
        "status.hardware with both NICs",
        Duration::from_secs(90),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            match &st.hardware {
                Some(hw) if hw.nics.len() == 2 => Ok(h),
                _ => Err(format!(
                    "{} {:?} {}",
                    h.provisioning_state(),
                    st.error_type,
                    st.error_message
                )),
            }
        },
    )
    .await;
    let hw = host
        .status
        .and_then(|s| s.hardware)
        .expect("hardware details");
    let by_name = |n: &str| {
        hw.nics
            .iter()
            .find(|nic| nic.name.as_deref() == Some(n))
            .unwrap_or_else(|| panic!("NIC {n} in {:?}", hw.nics))
    };
    let (eno1, eno2) = (by_name("eno1"), by_name("eno2"));
    assert_eq!(
        (eno1.dhcp_hostname.as_deref(), eno1.ip.as_deref()),
        (None, Some(leased_ip.as_str())),
        "eno1: no hostname (dhclient's was dropped), and bmo's leased address as inspection saw none"
    );
    assert_eq!(
        (eno2.dhcp_hostname.as_deref(), eno2.ip.as_deref()),
        (Some("udhcpc-node"), Some("192.0.2.9")),
        "eno2: udhcpc's hostname, inspection's own address"
    );
    assert_eq!(hw.hostname.as_deref(), Some("inspected-os-name"));
    let data = Api::<HardwareData>::namespaced(site.client.clone(), &site.ns)
        .get(name)
        .await
        .expect("HardwareData");
    assert_eq!(
        data.spec.hardware.as_ref().map(|h| h.nics.clone()),
        Some(hw.nics.clone()),
        "HardwareData has the same NICs"
    );

    // A DHCP exchange after inspection with another hostname reaches the status and
    // HardwareData within seconds: it wakes the host, which in a stable state would
    // otherwise be looked at only once a minute.
    crate::support::wait_for_state(
        &hosts,
        name,
        ProvisioningState::Available,
        Duration::from_secs(90),
    )
    .await;
    // Nothing shows from outside that the last reconcile of the settling host (its
    // power check) is over; give it this long, well below the one-minute poll.
    tokio::time::sleep(Duration::from_secs(3)).await;
    udhcpc(&net.client.handle(), "cli1", "renamed-node").await;
    let started = std::time::Instant::now();
    eventually(
        "eno2's new DHCP hostname in the status",
        Duration::from_secs(10),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let nics = h
                .status
                .and_then(|s| s.hardware)
                .map(|hw| hw.nics)
                .unwrap_or_default();
            let eno2 = nics.iter().find(|n| n.name.as_deref() == Some("eno2"));
            match eno2.and_then(|n| n.dhcp_hostname.as_deref()) {
                Some("renamed-node") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "timing: new DHCP hostname in the status after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let data = Api::<HardwareData>::namespaced(site.client.clone(), &site.ns)
        .get(name)
        .await
        .expect("HardwareData");
    let eno2 = data
        .spec
        .hardware
        .iter()
        .flat_map(|h| h.nics.iter())
        .find(|n| n.name.as_deref() == Some("eno2"))
        .and_then(|n| n.dhcp_hostname.clone());
    assert_eq!(
        eno2.as_deref(),
        Some("renamed-node"),
        "HardwareData follows"
    );

    // A restart keeps the leases, hostnames included.
    server.stop();
    let reopened = LeaseTable::open(&lease_file).expect("reopen the lease file");
    let back: Vec<_> = [&mac0, &mac1]
        .iter()
        .map(|m| reopened.get(m).and_then(|l| l.hostname))
        .collect();
    assert_eq!(back, [None, Some("renamed-node".to_owned())]);

    site.delete_host(name).await;
    site.stop().await;
    assert!(
        ironic.get_node(&node.uuid).await.expect("Ironic").is_none(),
        "deleting the host removed its Ironic node"
    );
}

/// The DHCP hostname of the NIC with `mac` in `name`'s status, if any.
async fn status_dhcp_hostname(
    hosts: &Api<BareMetalHost>,
    name: &str,
    mac: &MacAddr,
) -> Result<Option<String>, String> {
    let host = hosts.get(name).await.map_err(|e| e.to_string())?;
    let nics = host
        .status
        .and_then(|s| s.hardware)
        .map(|hw| hw.nics)
        .unwrap_or_default();
    Ok(nics
        .into_iter()
        .find(|n| n.mac.as_deref().and_then(|m| m.parse().ok()) == Some(*mac))
        .and_then(|n| n.dhcp_hostname))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_only_dhcp_answers_a_hosts_boot_mac_without_dhcp_hosts_and_its_hostname_shows_at_once()
 {
    let _shared = crate::support::shared();
    require(&["busybox", "ip"]);
    let log = captured_log();
    let (mac0, mac1) = (parse_mac(&unique_mac()), parse_mac(&unique_mac()));
    let net = two_client_net(&mac0, &mac1);
    let dir = TempDir::new("netboot-known");
    // No DHCP_HOSTS: the only known hosts are the controller's BareMetalHosts.
    let mut cfg = dhcp_config(dir.path(), "br0");
    cfg.dhcp_ignore = Some(DhcpIgnore::Unknown);
    let leases = LeaseTable::in_memory();
    let server = DhcpServer::start(net.server.handle(), cfg, leases.clone());
    let site =
        Site::start_knowing("nb-known", leases.clone(), Some(server.known_hosts.clone())).await;
    let client = net.client.handle();

    // No host has the MAC yet: the request is recorded (hostname included), not
    // answered.
    let refused = try_udhcpc(&client, "cli0", "before-known", 2, 1).await;
    assert!(refused.is_err(), "an unknown MAC got a lease");
    let seen = leases.get(&mac0).expect("the unknown client is recorded");
    assert_eq!(
        (seen.ip, seen.hostname.as_deref()),
        (None, Some("before-known")),
        "recorded, never given an address"
    );

    // A host booting from that MAC, with inspection disabled and its NICs given by
    // annotation, so that it settles in `available` with the NIC in its status.
    let name = "known-host";
    crate::support::create_bmc_secret(
        &site.client,
        &site.ns,
        &format!("{name}-bmc"),
        "admin",
        "password",
    )
    .await;
    let details = json!({"nics": [{"name": "eno1", "mac": mac0.to_string()}]});
    site.create_host(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "annotations": {
            "inspect.metal3.io": "disabled",
            "inspect.metal3.io/hardwaredetails": details.to_string(),
        }},
        "spec": {
            "online": false,
            "bootMACAddress": mac0.to_string().to_uppercase(),
            "automatedCleaningMode": "disabled",
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        }
    }))
    .await;
    let hosts = site.hosts();
    crate::support::wait_for_state(
        &hosts,
        name,
        ProvisioningState::Available,
        Duration::from_secs(90),
    )
    .await;
    // The hostname of the unanswered request is in the status too.
    eventually(
        "the recorded DHCP hostname in the status",
        Duration::from_secs(10),
        || async {
            match status_dhcp_hostname(&hosts, name, &mac0).await? {
                Some(h) if h == "before-known" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // Nothing shows from outside that the last reconcile of the settling host is
    // over; give it this long, well below the one-minute poll of a settled host.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Now the MAC is known: answered, with an address from DHCP_RANGE; the new
    // hostname wakes the host and reaches its status within seconds.
    let started = std::time::Instant::now();
    udhcpc(&client, "cli0", "known-node").await;
    let exchanged = started.elapsed();
    let lease = bound_lease(&leases, &mac0).await;
    let ip = lease.ip.expect("leased address");
    assert!(
        (u32::from(std::net::Ipv4Addr::new(10, 77, 0, 50))
            ..=u32::from(std::net::Ipv4Addr::new(10, 77, 0, 60)))
            .contains(&u32::from(ip)),
        "{ip} is from DHCP_RANGE"
    );
    eventually(
        "the new DHCP hostname in the status",
        Duration::from_secs(10),
        || async {
            match status_dhcp_hostname(&hosts, name, &mac0).await? {
                Some(h) if h == "known-node" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "timing: udhcpc's exchange took {:.2} s; the hostname was in the status {:.2} s after it began",
        exchanged.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let logged = log.text();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("DHCP lease bound for a known host")
                && l.contains(&mac0.to_string())
                && l.contains(&format!("{}/{name}", site.ns))),
        "the lease is logged with the host's namespace/name:\n{logged}"
    );

    // The other MAC, on no host, is still not answered.
    assert!(
        try_udhcpc(&client, "cli1", "stranger", 2, 1).await.is_err(),
        "a MAC on no host got a lease"
    );
    assert_ne!(leases.get(&mac1).map(|l| l.state), Some(LeaseState::Bound));

    site.delete_host(name).await;
    site.stop().await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_mac_becomes_one_discovered_host_and_a_deleted_one_stays_deleted() {
    let _shared = crate::support::shared();
    require(&["busybox", "ip"]);
    let (mac_a, mac_b, mac_known) = (
        parse_mac(&unique_mac()),
        parse_mac(&unique_mac()),
        parse_mac(&unique_mac()),
    );
    let net = TestNet::new(false);
    set_mac(&net, "cli0", &mac_a);
    let dir = TempDir::new("netboot-discovery");
    let cfg = dhcp_config(dir.path(), "srv0");
    let lease_file = cfg.lease_file.clone();
    let leases = LeaseTable::open(&lease_file).expect("lease file");
    let site = Site::start("nb-disc", leases.clone()).await;
    let settings = DiscoverySettings {
        namespace: site.ns.clone(),
        watch_namespace: Some(site.ns.clone()),
        limits: discovery::DiscoveryLimits::default(),
    };
    // A host the user made: its MAC is not discovered.
    site.create_host(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": "known"},
        "spec": {"online": false, "bootMACAddress": mac_known.to_string()}
    }))
    .await;
    let server = DhcpServer::start(net.server.handle(), cfg.clone(), leases.clone());
    let task = tokio::spawn(discovery::run(
        site.client.clone(),
        leases.clone(),
        settings.clone(),
    ));
    let client = net.client.handle();

    udhcpc(&client, "cli0", "newcomer").await;
    let name_a = discovery::host_name(&mac_a);
    let hosts = site.hosts();
    let host = eventually(
        "the discovered host to be unmanaged and discovered",
        Duration::from_secs(60),
        || async {
            let h = hosts
                .get_opt(&name_a)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not created yet")?;
            let st = h.status.clone().unwrap_or_default();
            if h.provisioning_state() == ProvisioningState::Unmanaged
                && st.operational_status == OperationalStatus::Discovered
            {
                Ok(h)
            } else {
                Err(format!(
                    "{} {:?}",
                    h.provisioning_state(),
                    st.operational_status
                ))
            }
        },
    )
    .await;
    assert_eq!(
        host.spec.boot_mac_address.as_deref(),
        Some(mac_a.to_string().as_str())
    );
    assert!(host.spec.bmc.is_none(), "no BMC details are made up");

    // The same MAC again, then the known host's MAC.
    udhcpc(&client, "cli0", "newcomer").await;
    set_mac(&net, "cli0", &mac_known);
    udhcpc(&client, "cli0", "known-one").await;

    // The user deletes the discovered host; bmo restarts (DHCP and discovery); the
    // MAC asks again. Then a second unknown MAC: discovery handles requests in
    // order, so once its host exists the earlier requests have been handled.
    site.delete_host(&name_a).await;
    task.abort();
    let _ = task.await;
    server.stop();
    drop(leases);
    let leases = LeaseTable::open(&lease_file).expect("reopen the lease file");
    let _server = DhcpServer::start(net.server.handle(), cfg, leases.clone());
    let _task = AbortOnDrop(tokio::spawn(discovery::run(
        site.client.clone(),
        leases.clone(),
        settings,
    )));
    set_mac(&net, "cli0", &mac_a);
    udhcpc(&client, "cli0", "newcomer").await;
    set_mac(&net, "cli0", &mac_b);
    udhcpc(&client, "cli0", "second").await;
    let name_b = discovery::host_name(&mac_b);
    eventually("the second MAC's host", Duration::from_secs(60), || async {
        hosts
            .get_opt(&name_b)
            .await
            .map_err(|e| e.to_string())?
            .map(|_| ())
            .ok_or_else(|| "not created yet".to_owned())
    })
    .await;
    assert_eq!(
        site.names().await,
        BTreeSet::from(["known".to_owned(), name_b.clone()]),
        "one host per unknown MAC; none for the known MAC; the deleted one not made again"
    );
    site.stop().await;
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_tries_again_on_the_next_request_when_the_create_failed() {
    let _shared = crate::support::shared();
    require(&["busybox", "ip"]);
    let mac = parse_mac(&unique_mac());
    let net = TestNet::new(false);
    set_mac(&net, "cli0", &mac);
    let dir = TempDir::new("netboot-discovery-retry");
    let cfg = dhcp_config(dir.path(), "srv0");
    let leases = LeaseTable::open(&cfg.lease_file).expect("lease file");
    let site = Site::start("nb-retry", leases.clone()).await;
    // Discovery's namespace does not exist yet: the first create fails.
    let target = unique_name("nb-later");
    let _server = DhcpServer::start(net.server.handle(), cfg.clone(), leases.clone());
    let _task = AbortOnDrop(tokio::spawn(discovery::run(
        site.client.clone(),
        leases.clone(),
        DiscoverySettings {
            namespace: target.clone(),
            watch_namespace: Some(site.ns.clone()),
            limits: discovery::DiscoveryLimits::default(),
        },
    )));
    let client = net.client.handle();
    let log = captured_log();
    udhcpc(&client, "cli0", "early").await;
    // What the operator sees: a warning naming the MAC and the namespace.
    eventually(
        "discovery's warning about the failed create",
        Duration::from_secs(30),
        || async {
            let text = log.text();
            text.lines()
                .find(|l| {
                    l.contains("discovery failed")
                        && l.contains(&mac.to_string())
                        && l.contains(&target)
                })
                .map(|_| ())
                .ok_or_else(|| format!("{} log lines so far", text.lines().count()))
        },
    )
    .await;
    assert_eq!(
        leases.get(&mac).and_then(|l| l.discovered_unix),
        None,
        "a failed create does not count as handled"
    );

    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(target.clone());
    Api::<Namespace>::all(site.client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
    udhcpc(&client, "cli0", "early").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(site.client.clone(), &target);
    let name = discovery::host_name(&mac);
    eventually(
        "the host once its namespace exists",
        Duration::from_secs(30),
        || async {
            hosts
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or_else(|| "not created yet".to_owned())
        },
    )
    .await;
    assert!(
        leases.get(&mac).and_then(|l| l.discovered_unix).is_some(),
        "handled now"
    );
    site.stop().await;
}

/// Everything this binary logs through `tracing` (bmo's `info` and above) while a test
/// holds a [`CapturedLog`]. The subscriber is installed once, globally (the discovery
/// task runs on the runtime's worker threads); it records nothing while no test of this
/// file captures, so the other netboot tests in this binary (floods, the TFTP memory
/// measurement) neither pay for it nor fill the buffer.
#[derive(Clone, Default)]
struct LogBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Tests capturing now.
static CAPTURING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The log since the buffer was made, as long as it lives (the buffer is never cleared:
/// tests look for lines of their own).
pub(crate) struct CapturedLog(LogBuffer);

impl CapturedLog {
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for CapturedLog {
    fn drop(&mut self) {
        CAPTURING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

pub(crate) fn captured_log() -> CapturedLog {
    use tracing_subscriber::layer::SubscriberExt;
    static LOG: std::sync::OnceLock<LogBuffer> = std::sync::OnceLock::new();
    let buffer = LOG
        .get_or_init(|| {
            let buffer = LogBuffer::default();
            let writer = buffer.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter("bmo=info")
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish()
                .with(tracing_subscriber::filter::filter_fn(|_| {
                    CAPTURING.load(std::sync::atomic::Ordering::SeqCst) > 0
                }));
            tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
            buffer
        })
        .clone();
    CAPTURING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    CapturedLog(buffer)
}

/// Sends one DISCOVER from each of `count` made-up MACs (`02:d1:sc:00:HI:LO` from
/// `first` on) on `cli0` of the client namespace, as a spoofing client would.
async fn spoof_discovers(ns: NsRef, first: u16, count: u16) {
    use dhcproto::v4::{DhcpOption, Message, MessageType};
    use dhcproto::{Encodable, Encoder};
    tokio::task::spawn_blocking(move || {
        ns.enter();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
            .expect("socket");
        s.set_broadcast(true).expect("broadcast");
        s.bind_device(Some(b"cli0")).expect("bind to cli0");
        s.bind(&std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 6868)).into())
            .expect("bind");
        let s: std::net::UdpSocket = s.into();
        for n in first..first + count {
            let [hi, lo] = n.to_be_bytes();
            let mac = [0x02, 0xd1, 0x5c, 0x00, hi, lo];
            let unspecified = std::net::Ipv4Addr::UNSPECIFIED;
            let mut m = Message::new_with_id(
                u32::from(n),
                unspecified,
                unspecified,
                unspecified,
                unspecified,
                &mac,
            );
            m.opts_mut()
                .insert(DhcpOption::MessageType(MessageType::Discover));
            let mut buf = Vec::new();
            m.encode(&mut Encoder::new(&mut buf)).expect("encode");
            let _ = s.send_to(&buf, (std::net::Ipv4Addr::BROADCAST, 67));
            if n % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    })
    .await
    .expect("spoofing thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_macs_make_no_more_hosts_than_the_discovery_limits() {
    // Floods in waves timed against the discovery window and counts the hosts made: alone.
    let _alone = crate::support::exclusive("netboot_host discovery flood");
    require(&["ip"]);
    let net = TestNet::new(false);
    let dir = TempDir::new("netboot-discovery-flood");
    let cfg = dhcp_config(dir.path(), "srv0");
    let leases = LeaseTable::open(&cfg.lease_file).expect("lease file");
    let site = Site::start("nb-flood", leases.clone()).await;
    let log = captured_log();
    let _server = DhcpServer::start(net.server.handle(), cfg, leases.clone());
    let limits = discovery::DiscoveryLimits {
        per_window: 3,
        per_minute: 5,
        total: 100,
    };
    let _task = AbortOnDrop(tokio::spawn(discovery::run(
        site.client.clone(),
        leases.clone(),
        DiscoverySettings {
            namespace: site.ns.clone(),
            watch_namespace: Some(site.ns.clone()),
            limits,
        },
    )));
    let client = net.client.handle();
    let spoofed = |n: usize| {
        leases
            .list()
            .iter()
            .filter(|l| l.mac.0[..4] == [0x02, 0xd1, 0x5c, 0x00])
            .count()
            >= n
    };

    // 300 spoofed MACs at once: one burst window's worth of hosts.
    spoof_discovers(client.clone(), 0, 300).await;
    eventually(
        "the DHCP server to see the spoofed MACs",
        Duration::from_secs(30),
        || async {
            spoofed(250)
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    )
    .await;
    let hosts_made = |n: usize| {
        let site = &site;
        async move {
            eventually(
                &format!("{n} hosts made"),
                Duration::from_secs(30),
                || async {
                    let made = site.names().await.len();
                    (made >= n).then_some(()).ok_or(format!("{made}"))
                },
            )
            .await;
            // Then held: nothing more comes of the spoofed MACs.
            tokio::time::sleep(Duration::from_secs(3)).await;
            site.names().await.len()
        }
    };
    let after_burst = hosts_made(3).await;
    assert_eq!(after_burst, 3, "hosts after the first burst");
    assert!(
        log.text().contains("BMO_DISCOVERY_BURST"),
        "a warning names the burst limit"
    );

    // Another 300 once the window has passed: the per-minute limit stops it at 5.
    // The three hosts were made before the 3 s hold above: a full window later they
    // are out of it.
    tokio::time::sleep(discovery::DISCOVERY_WINDOW).await;
    spoof_discovers(client, 300, 300).await;
    eventually("the second wave seen", Duration::from_secs(30), || async {
        spoofed(500)
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    let after_minute = hosts_made(5).await;
    println!(
        "600 spoofed MACs: {after_burst} hosts after the first 300, {after_minute} after the second 300 (limits {limits:?})"
    );
    assert_eq!(after_minute, 5, "hosts within the minute");
    assert!(
        log.text().contains("BMO_DISCOVERY_PER_MINUTE"),
        "a warning names the per-minute limit"
    );
    site.stop().await;
}
