//! Servicing, end to end: a provisioned (externally provisioned, so adopted without
//! the agent) VM behind sushy-emulator's libvirt driver, whose emulated BIOS keeps
//! its attributes in the domain's metadata. With the documented HostUpdatePolicy
//! (`firmwareSettings: onReboot`), a changed HostFirmwareSettings value is applied
//! during a reboot through Ironic's servicing (the Redfish BIOS `apply_configuration`
//! service step, which needs no ramdisk) and read back; a value the BIOS does not
//! take fails servicing (`servicing error`), and withdrawing it brings the host back.
//!
//! The failing value is a real one: the BIOS registry types `QuietBoot` as Boolean,
//! so Ironic sends JSON `false`; the emulator stores every attribute as a string and
//! reports `"False"`, so Ironic never sees its value applied and fails the step when
//! its wait ends (`service_callback_timeout`, shortened here).
//!
//! The BMC is `redfish-virtualmedia://` and bmo builds the hosts' agent ISOs itself
//! (`BMO_PREPROV_IMAGE_ISO`: the ESP image's GRUB for UEFI and ISOLINUX for BIOS,
//! Ironic's address on the kernel command line), which Ironic takes as the node's
//! `deploy_iso`. After the servicing checks the host leaves external provisioning
//! with `automatedCleaningMode: metadata`: the BMC inserts bmo's ISO, the VM boots it
//! under OVMF, the agent (an address from bmo's DHCP) cleans the disk's metadata and
//! the host ends available (upstream's `externally_provisioned` turned off, and issue
//! 33's "one VM run boots from bmo's ISO"). vm_vmedia boots the ISO Ironic builds.
//!
//! The VM is UEFI: under Legacy boot sushy-emulator answers Ironic's `GET …/SecureBoot`
//! with 501, which sushy retries 10 times 3 s apart each time Ironic caches the boot
//! mode (three times on this path, about 90 s; docs/performance.md).

use std::time::{Duration, Instant};

use bmo::api::BareMetalHost;
use bmo::api::firmware::{HostFirmwareSettings, HostUpdatePolicy};
use bmo::ironic::{ClientConfig, IronicClient};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::lab::{Firmware, Lab, PROVISIONING_IP, Vm, VmSpec};
use crate::support::netboot::ChildGuard;
use crate::support::{Stack, new_namespace, unique_name};

const HOST: &str = "serviced";

/// The host and its node, polled once a second; what each showed is noted once.
struct Watch<'a> {
    hosts: Api<BareMetalHost>,
    ironic: IronicClient,
    node: String,
    lab: &'a Lab,
    start: Instant,
    seen: Vec<String>,
}

impl Watch<'_> {
    /// Notes `what` unless it is already the latest of its source (the text before
    /// ": ").
    fn note(&mut self, what: String) {
        let source = |w: &str| w.split_once(": ").map(|(s, _)| s.to_owned());
        let latest = self.seen.iter().rev().find(|w| source(w) == source(&what));
        if latest != Some(&what) {
            eprintln!(
                "vm_servicing: {:>6.1} s  {what}",
                self.start.elapsed().as_secs_f64()
            );
            self.seen.push(what);
        }
    }

    fn saw(&self, what: &str) -> bool {
        self.seen.iter().any(|s| s == what)
    }

    async fn until(&mut self, what: &str, timeout: Duration, done: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(node)) = self.ironic.get_node(&self.node).await {
                self.note(format!("ironic: {}", node.provision_state()));
            }
            let host = match self.hosts.get(HOST).await {
                Ok(host) => serde_json::to_value(&host).unwrap(),
                Err(e) => json!({"error": e.to_string()}),
            };
            let status = &host["status"];
            self.note(format!(
                "host: {} / {}",
                status["provisioning"]["state"].as_str().unwrap_or(""),
                status["operationalStatus"].as_str().unwrap_or("")
            ));
            let reboot = host["metadata"]["annotations"]
                .get("reboot.metal3.io")
                .is_some();
            self.note(format!(
                "power: on {} reboot annotation {reboot}",
                status["poweredOn"]
            ));
            let step = &status["provisioning"]["currentStep"];
            if let (Some(kind), Some(name)) = (step["type"].as_str(), step["name"].as_str()) {
                self.note(format!("step: {kind} {name}"));
            }
            if done(&host) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; host status: {status}\nseen: {:?}\n{}",
                self.seen,
                self.lab.logs_tail()
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The host is in `state`, OK and on, and no reboot is pending.
fn ok_and_on(state: &'static str) -> impl Fn(&Value) -> bool {
    move |h| {
        let s = &h["status"];
        s["provisioning"]["state"] == state
            && s["operationalStatus"] == "OK"
            && s["poweredOn"] == true
            && h["metadata"]["annotations"]
                .get("reboot.metal3.io")
                .is_none()
    }
}

/// The HostUpdatePolicy example of docs/api.md (examples/upstream-kinds.yaml), named
/// after the host.
fn documented_policy() -> HostUpdatePolicy {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/upstream-kinds.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut example = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "HostUpdatePolicy")
        .expect("the example has a HostUpdatePolicy");
    example["metadata"]["name"] = json!(HOST);
    serde_json::from_value(example).unwrap()
}

async fn patch_settings(api: &Api<HostFirmwareSettings>, settings: Value) {
    api.patch(
        HOST,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"settings": settings}})),
    )
    .await
    .expect("patch the HostFirmwareSettings");
}

/// Waits until the HostFirmwareSettings judged its spec: `ChangeDetected` as given,
/// for the current generation.
async fn judged(api: &Api<HostFirmwareSettings>, change: &str) -> Value {
    crate::support::eventually("the settings judged", Duration::from_secs(120), || {
        let api = api.clone();
        async move {
            let hfs =
                serde_json::to_value(api.get(HOST).await.map_err(|e| e.to_string())?).unwrap();
            let fresh = hfs["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "ChangeDetected"
                        && c["status"] == change
                        && c["observedGeneration"] == hfs["metadata"]["generation"]
                })
            });
            fresh.then_some(hfs.clone()).ok_or(hfs.to_string())
        }
    })
    .await
}

async fn reboot(hosts: &Api<BareMetalHost>) {
    // Hard: the VM runs no OS that would act on a soft power-off.
    hosts
        .patch(
            HOST,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reboot.metal3.io": "{\"mode\":\"hard\"}"
            }}})),
        )
        .await
        .expect("annotate the host");
}

async fn create_host(client: &kube::Client, ns: &str, lab: &Lab, vm: &Vm) {
    let mut secret = Secret::default();
    secret.metadata.name = Some("serviced-bmc".into());
    secret.data = Some(
        [("username", "admin"), ("password", "password")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the BMC Secret");
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": HOST},
        "spec": {
            "online": true, "externallyProvisioned": true, "bootMACAddress": vm.mac,
            "bootMode": "UEFI",
            "bmc": {
                "address": lab.redfish_address(vm).replacen("redfish+", "redfish-virtualmedia+", 1),
                "credentialsName": "serviced-bmc"
            }
        }
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create the host");
}

/// `bmo run` building the hosts' agent ISOs itself (`iso` PreprovisioningImages,
/// the ESP image and Debian's ISOLINUX linked into its images directory), with
/// Ironic's address and `marker` on their kernel command line; DHCP for the agent.
fn start_bmo_building_isos(lab: &Lab, ns: &str, marker: &str) -> ChildGuard {
    use bmo::controller::preprov_image::agent_iso;
    let esp = Stack::get().var("BMO_ESP_DIR").expect("BMO_ESP_DIR");
    let esp = format!("{esp}/esp.img");
    for (from, name) in [
        (esp.as_str(), agent_iso::ESP_IMAGE),
        ("/usr/lib/ISOLINUX/isolinux.bin", agent_iso::ISOLINUX_BIN),
        (
            "/usr/lib/syslinux/modules/bios/ldlinux.c32",
            agent_iso::LDLINUX_C32,
        ),
    ] {
        std::fs::copy(from, lab.images.join(name)).expect("copy the BIOS loader");
    }
    let params = format!(
        "console=ttyS0,115200 ipa-insecure=1 ipa-api-url=http://{PROVISIONING_IP}:{} {marker}=1",
        lab.ironic_port_in_ns()
    );
    lab.start_bmo_with(
        ns,
        &[
            ("BMO_TFTP", "false"),
            ("BMO_BUILD_PREPROV_IMAGE", "true"),
            ("BMO_PREPROV_IMAGE_INITRD", "true"),
            ("BMO_PREPROV_IMAGE_ISO", "true"),
            ("BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS", &params),
        ],
    )
}

/// Upstream's `externally_provisioned` turned off, on a real VM: deprovisioning with
/// metadata cleaning boots the agent from the ISO bmo built (the node's
/// `deploy_iso`), inserted by the BMC, under UEFI; the host ends available.
async fn leave_external_provisioning_through_bmos_iso(
    watch: &mut Watch<'_>,
    vm: &Vm,
    marker: &str,
) {
    watch
        .hosts
        .patch(
            HOST,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "externallyProvisioned": false, "automatedCleaningMode": "metadata"
            }})),
        )
        .await
        .expect("patch the host");
    watch
        .until("available", Duration::from_secs(900), |h| {
            h["status"]["provisioning"]["state"] == "available"
        })
        .await;
    assert!(
        watch.saw("ironic: clean wait"),
        "the agent cleaned the node: {:?}",
        watch.seen
    );
    let node = watch.ironic.get_node(&watch.node).await.unwrap().unwrap();
    let raw = serde_json::to_value(&node).unwrap();
    assert_eq!(
        raw["boot_interface"],
        json!("redfish-virtual-media"),
        "{raw}"
    );
    let iso = raw["driver_info"]["deploy_iso"]
        .as_str()
        .unwrap_or_default();
    assert!(
        iso.starts_with(&format!("http://{PROVISIONING_IP}:"))
            && iso.contains("/preprovisioning-iso/")
            && iso.ends_with("/ironic-python-agent.iso"),
        "the node boots bmo's ISO: {raw}"
    );
    let console = vm.console();
    for needle in [marker, "ipa-ramdisk: starting ironic-python-agent"] {
        assert!(
            console.contains(needle),
            "the agent's console shows {needle:?}:\n{}",
            crate::watch::tail(&console, 60)
        );
    }
    assert!(
        console
            .lines()
            .any(|l| l.contains("Command line:") && l.contains(marker)),
        "the agent's kernel has bmo's command line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bios_settings_change_on_a_provisioned_vm_through_servicing() {
    // One lab at a time: each runs the machine's one system libvirtd.
    let _alone = crate::support::exclusive("vm_servicing");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    // Ironic looks at the BIOS every 5 s after its reboot, and gives a service step
    // that never sees its value 40 s (default: 30 min).
    let mut lab = Lab::start_virtual_media(&[
        "[redfish]",
        "firmware_update_status_interval = 5",
        "[conductor]",
        "service_callback_timeout = 40",
        "check_provision_state_interval = 5",
    ]);
    let ns = new_namespace(&client, "vm-servicing").await;
    let iso_marker = unique_name("bmo-own-iso");
    let _bmo = start_bmo_building_isos(&lab, &ns, &iso_marker);
    // Until the agent: no boot ROM on the NIC (UEFI, booting from hd) and an empty
    // disk, so the VM boots nothing, which keeps it cheap. The agent wants a root
    // device of 4 GiB.
    let vm = lab.define_vm_booting(
        VmSpec {
            name: &unique_name("bmo-vm-serviced"),
            uuid: "6f1b7c2e-3d4a-4b5c-8d9e-0a1b2c3d4e11",
            mac: "52:54:00:7e:00:11",
            memory_mib: 2560,
            cpus: 2,
            disk_gib: 5,
            firmware: Firmware::Uefi,
        },
        "hd",
    );
    lab.wait_for_bmc(&vm).await;
    let bios = lab.bmc_bios_attributes(&vm);
    assert_eq!(bios["ProcTurboMode"], "Enabled", "initial BIOS: {bios}");
    assert_eq!(bios["QuietBoot"], "true", "initial BIOS: {bios}");

    create_host(&client, &ns, &lab, &vm).await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let mut watch = Watch {
        hosts: hosts.clone(),
        ironic: IronicClient::connect(ClientConfig::new(lab.ironic_from_test.clone()))
            .await
            .expect("connect to the lab's Ironic"),
        node: format!("{ns}~{HOST}"),
        lab: &lab,
        start: Instant::now(),
        seen: Vec::new(),
    };
    watch
        .until(
            "externally provisioned and on",
            Duration::from_secs(300),
            ok_and_on("externally provisioned"),
        )
        .await;
    let settings: Api<HostFirmwareSettings> = Api::namespaced(client.clone(), &ns);
    crate::support::eventually("the HostFirmwareSettings", Duration::from_secs(120), || {
        let settings = settings.clone();
        async move {
            match settings.get_opt(HOST).await {
                Ok(Some(s)) if s.status.as_ref().is_some_and(|st| !st.settings.is_empty()) => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;

    // Without a policy, a changed setting waits: the reboot leaves the BIOS alone.
    patch_settings(&settings, json!({"ProcTurboMode": "Disabled"})).await;
    judged(&settings, "True").await;
    reboot(&hosts).await;
    watch
        .until(
            "the reboot without policy",
            Duration::from_secs(180),
            ok_and_on("externally provisioned"),
        )
        .await;
    assert!(
        !watch.saw("host: externally provisioned / servicing"),
        "{:?}",
        watch.seen
    );
    assert_eq!(lab.bmc_bios_attributes(&vm)["ProcTurboMode"], "Enabled");

    // The documented policy: the next reboot services the host.
    Api::<HostUpdatePolicy>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &documented_policy())
        .await
        .expect("create the HostUpdatePolicy");
    reboot(&hosts).await;
    watch
        .until("servicing", Duration::from_secs(180), |h| {
            h["status"]["operationalStatus"] == "servicing"
        })
        .await;
    watch
        .until(
            "serviced",
            Duration::from_secs(300),
            ok_and_on("externally provisioned"),
        )
        .await;
    assert!(
        watch.saw("ironic: servicing") || watch.saw("ironic: service wait"),
        "{:?}",
        watch.seen
    );
    assert!(
        watch.saw("step: service bios.apply_configuration"),
        "currentStep showed the service step: {:?}",
        watch.seen
    );
    assert_eq!(lab.bmc_bios_attributes(&vm)["ProcTurboMode"], "Disabled");
    let hfs = judged(&settings, "False").await;
    assert_eq!(
        hfs["status"]["settings"]["ProcTurboMode"], "Disabled",
        "{hfs}"
    );

    // A value the BIOS does not take: servicing fails, as upstream reports it.
    patch_settings(
        &settings,
        json!({"ProcTurboMode": "Disabled", "QuietBoot": "false"}),
    )
    .await;
    judged(&settings, "True").await;
    reboot(&hosts).await;
    watch
        .until("servicing error", Duration::from_secs(300), |h| {
            h["status"]["errorType"] == "servicing error"
        })
        .await;
    let host = serde_json::to_value(hosts.get(HOST).await.unwrap()).unwrap();
    assert_eq!(
        host["status"]["provisioning"]["state"],
        "externally provisioned"
    );
    assert_eq!(host["status"]["operationalStatus"], "error");
    assert!(watch.saw("ironic: service failed"), "{:?}", watch.seen);
    // bmo publishes the event right after the status write the watch just saw.
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    let failure =
        crate::support::eventually("a ServicingError event", Duration::from_secs(30), || {
            let events = events.clone();
            async move {
                let listed = events
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                listed
                    .items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some("ServicingError"))
                    .cloned()
                    .ok_or_else(|| format!("{:?}", listed.items))
            }
        })
        .await;
    assert_eq!(failure.involved_object.name.as_deref(), Some(HOST));
    assert_eq!(failure.type_.as_deref(), Some("Warning"));
    eprintln!("vm_servicing: error: {}", host["status"]["errorMessage"]);

    // Withdrawing the value lets the host recover: servicing is aborted and the host
    // is back in service, with the setting that was applied kept.
    patch_settings(
        &settings,
        json!({"ProcTurboMode": "Disabled", "QuietBoot": null}),
    )
    .await;
    watch
        .until(
            "recovered",
            Duration::from_secs(300),
            ok_and_on("externally provisioned"),
        )
        .await;
    let host = serde_json::to_value(hosts.get(HOST).await.unwrap()).unwrap();
    assert!(
        host["status"]["provisioning"].get("currentStep").is_none(),
        "no step runs any more: {host}"
    );
    let node = watch.ironic.get_node(&watch.node).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "active");
    assert!(!node.maintenance, "the node is out of maintenance");
    assert_eq!(lab.bmc_bios_attributes(&vm)["ProcTurboMode"], "Disabled");
    let serviced = watch.start.elapsed().as_secs_f64();
    eprintln!("vm_servicing: serviced in {serviced:.0} s");

    leave_external_provisioning_through_bmos_iso(&mut watch, &vm, &iso_marker).await;
    eprintln!(
        "vm_servicing: done in {:.0} s ({:.0} s after servicing)",
        watch.start.elapsed().as_secs_f64(),
        watch.start.elapsed().as_secs_f64() - serviced
    );
    let _ = std::process::Command::new("virsh")
        .args(["-c", "qemu:///system", "destroy", &vm.name])
        .output();
}
