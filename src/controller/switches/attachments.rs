//! Which BareMetalHost interfaces use each HostNetworkAttachment, recorded in the
//! attachment's [`IN_USE_ANNOTATION`] so that the admission policy
//! `bmo-hostnetworkattachment-in-use` can refuse changing or deleting one in use (the
//! check upstream's webhook makes by listing hosts, which a policy cannot).
//!
//! Always on, as upstream's webhook is. Every host or attachment change recomputes
//! the annotations of the attachments it touches; between a host naming an attachment
//! and the annotation landing there is a window of about a reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::api::network::IN_USE_ANNOTATION;
use crate::api::{BareMetalHost, HostNetworkAttachment};
use crate::controller::runtime::store::{StoreError, conflict_or};
use crate::controller::runtime::watch::{WatchBackoff, api_in};

use super::store::SWITCH_FIELD_MANAGER;

/// Pause before trying again after a failed write.
const ERROR_RETRY: Duration = Duration::from_secs(5);

/// `namespace/name` of an attachment.
type AttachmentKey = (String, String);

/// The interfaces of `hosts` that reference each attachment, as the annotation
/// writes them (`namespace/host[interface]`), sorted.
pub fn references(hosts: &[&BareMetalHost]) -> BTreeMap<AttachmentKey, String> {
    let mut users: BTreeMap<AttachmentKey, BTreeSet<String>> = BTreeMap::new();
    for host in hosts {
        let host_ns = host.namespace().unwrap_or_default();
        for nic in &host.spec.network_interfaces {
            let reference = &nic.host_network_attachment;
            if reference.name.is_empty() {
                continue;
            }
            let ns = reference
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| host_ns.clone());
            let nic_id = nic
                .name
                .clone()
                .or_else(|| nic.mac_address.clone())
                .unwrap_or_default();
            users
                .entry((ns, reference.name.clone()))
                .or_default()
                .insert(format!("{host_ns}/{}[{nic_id}]", host.name_any()));
        }
    }
    users
        .into_iter()
        .map(|(key, set)| (key, set.into_iter().collect::<Vec<_>>().join(", ")))
        .collect()
}

/// Runs until `shutdown` resolves; with `namespace` only that namespace's hosts and
/// attachments are looked at. `hosts` is the cache of the shared host watch, and
/// `host_events` moves with each of its events (changes that come close together
/// are looked at once).
pub async fn run(
    client: Client,
    namespace: Option<String>,
    hosts: Store<BareMetalHost>,
    mut host_events: watch::Receiver<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let attachments_api: Api<PartialObjectMeta<HostNetworkAttachment>> =
        api_in(&client, namespace.as_deref());
    let (attachments, attachment_writer) = reflector::store();
    let mut attachment_events = watcher(attachments_api, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .reflect(attachment_writer)
        .boxed();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut attachments_listed = false;
    let mut retry = false;
    loop {
        let pause = async {
            if retry {
                tokio::time::sleep(ERROR_RETRY).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            changed = host_events.changed() => if changed.is_err() {
                return;
            },
            change = attachment_events.next() => match change {
                Some(event) => {
                    attachments_listed |= matches!(event, Ok(watcher::Event::InitDone));
                }
                None => return,
            },
            () = pause => {}
        }
        // No annotation is cleared before both were listed.
        let hosts_listed = hosts.wait_until_ready().now_or_never().is_some();
        if !(hosts_listed && attachments_listed) {
            continue;
        }
        retry = match annotate(&client, &hosts, &attachments).await {
            Ok(()) => false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot record which hosts use HostNetworkAttachments; retrying");
                true
            }
        };
    }
}

/// Brings every attachment's annotation in line with the hosts that reference it.
async fn annotate(
    client: &Client,
    hosts: &Store<BareMetalHost>,
    attachments: &Store<PartialObjectMeta<HostNetworkAttachment>>,
) -> Result<(), StoreError> {
    let host_state = hosts.state();
    let wanted = references(&host_state.iter().map(AsRef::as_ref).collect::<Vec<_>>());
    for attachment in attachments.state() {
        let ns = attachment.namespace().unwrap_or_default();
        let name = attachment.name_any();
        let want = wanted.get(&(ns.clone(), name.clone())).cloned();
        let have = attachment.annotations().get(IN_USE_ANNOTATION).cloned();
        if want == have || (want.is_none() && have.as_deref() == Some("")) {
            continue;
        }
        tracing::info!(attachment = %name, namespace = %ns, used_by = want.as_deref().unwrap_or("none"), "HostNetworkAttachment users changed");
        // Apply: with no users the field is left out, so the annotation goes.
        let annotations = match &want {
            Some(users) => json!({ IN_USE_ANNOTATION: users }),
            None => json!({}),
        };
        let body = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostNetworkAttachment",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        });
        Api::<HostNetworkAttachment>::namespaced(client.clone(), &ns)
            .patch(
                &name,
                &PatchParams::apply(SWITCH_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(conflict_or)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(ns: &str, name: &str, nics: serde_json::Value) -> BareMetalHost {
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"online": false, "networkInterfaces": nics}
        }))
        .unwrap()
    }

    #[test]
    fn references_name_each_host_interface_by_name_or_mac() {
        let a = host(
            "hosts",
            "a",
            json!([
                {"name": "eth0", "hostNetworkAttachment": {"name": "trunk"}},
                {"macAddress": "02:00:00:00:00:01", "hostNetworkAttachment": {"name": "trunk"}},
                {"name": "eth2", "hostNetworkAttachment": {"name": "storage", "namespace": "net"}}
            ]),
        );
        let b = host(
            "hosts",
            "b",
            json!([{"name": "eth0", "hostNetworkAttachment": {"name": "trunk"}}]),
        );
        let refs = references(&[&b, &a]);
        assert_eq!(
            refs[&("hosts".to_owned(), "trunk".to_owned())],
            "hosts/a[02:00:00:00:00:01], hosts/a[eth0], hosts/b[eth0]"
        );
        assert_eq!(
            refs[&("net".to_owned(), "storage".to_owned())],
            "hosts/a[eth2]"
        );
        assert_eq!(refs.len(), 2);
    }
}
