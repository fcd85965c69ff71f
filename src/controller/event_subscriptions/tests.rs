//! Reconciler tests: the in-memory store and a recording subscriber.

use std::sync::Mutex;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER;
use crate::api::{BMCEventSubscriptionSpec, BareMetalHost};
use crate::controller::runtime::store::{MemoryObjects, StoreError};
use crate::provisioner::{NodeRef, ProvisionerError, SubscriptionRequest};

const SECRET_VALUE: &str = "Bearer s3cr3t-t0ken";

/// Answers creations with `answer` and records every call.
struct Recorder {
    answer: SubscriptionAnswer<String>,
    /// Deletions are refused while this is set.
    refuse_delete: std::sync::atomic::AtomicBool,
    created: Mutex<Vec<SubscriptionRequest>>,
    deleted: Mutex<Vec<String>>,
}

impl Recorder {
    fn answering(answer: SubscriptionAnswer<String>) -> Self {
        Self {
            answer,
            refuse_delete: Default::default(),
            created: Mutex::default(),
            deleted: Mutex::default(),
        }
    }
}

impl EventSubscriber for Recorder {
    async fn create_subscription(
        &self,
        _node: &NodeRef,
        request: &SubscriptionRequest,
    ) -> Result<SubscriptionAnswer<String>, ProvisionerError> {
        self.created.lock().unwrap().push(request.clone());
        Ok(match &self.answer {
            SubscriptionAnswer::Refused(why) => {
                SubscriptionAnswer::Refused(request.mask_header_values(why))
            }
            other => other.clone(),
        })
    }

    async fn delete_subscription(
        &self,
        _node: &NodeRef,
        id: &str,
    ) -> Result<SubscriptionAnswer<()>, ProvisionerError> {
        self.deleted.lock().unwrap().push(id.to_owned());
        if self.refuse_delete.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(SubscriptionAnswer::Refused(
                "connection to the BMC timed out".into(),
            ));
        }
        Ok(SubscriptionAnswer::Done(()))
    }
}

fn host(with_node: bool) -> BareMetalHost {
    let mut host: BareMetalHost = serde_json::from_value(serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "node-0", "namespace": "ns"},
        "spec": {"online": false, "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1", "credentialsName": "c"}}
    }))
    .unwrap();
    if with_node {
        let mut status = crate::api::BareMetalHostStatus::default();
        status.provisioning.id = "uuid-1".into();
        host.status = Some(status);
    }
    host
}

fn subscription() -> BMCEventSubscription {
    let mut s = BMCEventSubscription::new(
        "events",
        BMCEventSubscriptionSpec {
            host_name: Some("node-0".into()),
            destination: Some("http://collector.example/events".into()),
            context: Some("ctx-1".into()),
            http_headers_ref: Some(SecretReference {
                name: Some("headers".into()),
                namespace: Some("ns".into()),
            }),
        },
    );
    s.metadata.namespace = Some("ns".into());
    s
}

fn headers_secret() -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some("headers".into());
    secret.metadata.namespace = Some("ns".into());
    secret.data = Some(
        [(
            "Authorization".to_owned(),
            ByteString(SECRET_VALUE.as_bytes().to_vec()),
        )]
        .into(),
    );
    secret
}

/// The subscription as stored now; `None` once deleted.
fn subscription_now<P>(
    ctx: &SubscriptionContext<P, MemoryObjects>,
) -> Option<BMCEventSubscription> {
    ctx.store.stored("ns", "events")
}

async fn reconcile_stored<P: EventSubscriber>(ctx: &SubscriptionContext<P, MemoryObjects>) -> Next {
    let stored = subscription_now(ctx).expect("stored");
    reconcile(&stored, ctx).await.expect("reconcile")
}

/// The stored subscription's `status.error`.
fn stored_error<P>(ctx: &SubscriptionContext<P, MemoryObjects>) -> String {
    subscription_now(ctx)
        .and_then(|s| s.status)
        .and_then(|s| s.error)
        .expect("status.error")
}

fn context(answer: SubscriptionAnswer<String>) -> SubscriptionContext<Recorder, MemoryObjects> {
    let store = MemoryObjects::default();
    store.put(subscription());
    store.put(host(true));
    store.put(headers_secret());
    SubscriptionContext {
        provisioner: Recorder::answering(answer),
        store,
        namespace: None,
    }
}

#[tokio::test]
async fn creates_once_then_deletes_with_the_object() {
    let ctx = context(SubscriptionAnswer::Done("sub-7".into()));
    assert_eq!(reconcile_stored(&ctx).await, Next::OnChange);
    let stored = subscription_now(&ctx).unwrap();
    assert_eq!(stored.finalizers(), [BMC_EVENT_SUBSCRIPTION_FINALIZER]);

    reconcile_stored(&ctx).await;
    let stored = subscription_now(&ctx).unwrap();
    let status = stored.status.clone().unwrap();
    assert_eq!(status.subscription_id.as_deref(), Some("sub-7"));
    assert_eq!(status.error, None);
    {
        let created = ctx.provisioner.created.lock().unwrap();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].destination, "http://collector.example/events");
        assert_eq!(created[0].context.as_deref(), Some("ctx-1"));
        assert_eq!(created[0].http_headers[0].0, "Authorization");
        assert_eq!(created[0].http_headers[0].1.expose(), SECRET_VALUE);
    }

    // Settled: no second subscription.
    assert_eq!(reconcile_stored(&ctx).await, Next::OnChange);
    assert_eq!(ctx.provisioner.created.lock().unwrap().len(), 1);

    let mut deleting = subscription_now(&ctx).unwrap();
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    ctx.store.put(deleting);
    reconcile_stored(&ctx).await;
    assert_eq!(*ctx.provisioner.deleted.lock().unwrap(), ["sub-7"]);
    assert!(subscription_now(&ctx).is_none());
}

#[tokio::test]
async fn waits_for_the_node_before_subscribing() {
    let ctx = context(SubscriptionAnswer::Done("sub-7".into()));
    ctx.store.put(host(false));
    reconcile_stored(&ctx).await;
    assert_eq!(reconcile_stored(&ctx).await, Next::OnChange);
    assert!(ctx.provisioner.created.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_refusal_names_host_bmc_and_fix_without_header_values() {
    let why = format!(
        "Redfish exception occurred. Error: payload {{'HttpHeaders': [{{'Authorization': '{SECRET_VALUE}'}}]}}: \
         The attribute EventService/@odata.id is missing from the resource /redfish/v1"
    );
    let ctx = context(SubscriptionAnswer::Refused(why));
    reconcile_stored(&ctx).await;
    assert_eq!(
        reconcile_stored(&ctx).await,
        Next::After(state_machine::RETRY)
    );
    let error = stored_error(&ctx);
    assert!(error.contains("ns/node-0"), "{error}");
    assert!(error.contains("redfish+http://127.0.0.1:8000"), "{error}");
    assert!(error.contains("no Redfish EventService"), "{error}");
    assert!(!error.contains(SECRET_VALUE), "{error}");
    let events = ctx.store.events();
    assert_eq!(events.len(), 1);
    assert!(events[0].warning);
    assert!(!events[0].message.contains(SECRET_VALUE));

    // The same refusal again: no second event.
    reconcile_stored(&ctx).await;
    assert_eq!(ctx.store.events().len(), 1);
}

#[tokio::test]
async fn a_password_in_the_bmc_address_stays_out_of_the_refusal() {
    let ctx = context(SubscriptionAnswer::Refused("not supported".into()));
    let mut with_password = host(true);
    // A `/` in the password defeats a URL parser; the address guard's rule does not.
    let address = "redfish://admin:pa/ss@10.0.0.9/redfish/v1/Systems/1";
    with_password.spec.bmc.as_mut().unwrap().address = address.into();
    ctx.store.put(with_password);
    reconcile_stored(&ctx).await;
    reconcile_stored(&ctx).await;
    let error = stored_error(&ctx);
    assert!(error.contains("redfish://***@10.0.0.9"), "{error}");
    for shown in [error, ctx.store.events()[0].message.clone()] {
        assert!(
            !shown.contains("pa/ss") && !shown.contains("admin"),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn a_missing_header_secret_or_host_is_reported() {
    let ctx = context(SubscriptionAnswer::Done("sub-7".into()));
    let store = MemoryObjects::default();
    store.put(subscription());
    store.put(host(true));
    let ctx = SubscriptionContext { store, ..ctx };
    reconcile_stored(&ctx).await;
    reconcile_stored(&ctx).await;
    let error = stored_error(&ctx);
    assert!(error.contains("Secret ns/headers"), "{error}");
    assert!(ctx.provisioner.created.lock().unwrap().is_empty());

    let store = MemoryObjects::default();
    store.put(subscription());
    let ctx = SubscriptionContext { store, ..ctx };
    assert_eq!(reconcile_stored(&ctx).await, Next::OnChange);
    let error = stored_error(&ctx);
    assert!(
        error.contains("BareMetalHost ns/node-0 not found"),
        "{error}"
    );
}

#[tokio::test]
async fn a_refused_deletion_keeps_the_object_until_the_bmc_deletes() {
    let ctx = context(SubscriptionAnswer::Done("sub-7".into()));
    reconcile_stored(&ctx).await;
    reconcile_stored(&ctx).await;
    let mut deleting = subscription_now(&ctx).unwrap();
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    ctx.store.put(deleting);
    ctx.provisioner
        .refuse_delete
        .store(true, std::sync::atomic::Ordering::SeqCst);

    assert_eq!(
        reconcile_stored(&ctx).await,
        Next::After(state_machine::RETRY)
    );
    let error = stored_error(&ctx);
    assert!(
        error.contains("did not delete event subscription sub-7"),
        "{error}"
    );
    assert!(error.contains(BMC_EVENT_SUBSCRIPTION_FINALIZER), "{error}");
    assert_eq!(
        subscription_now(&ctx).unwrap().finalizers(),
        [BMC_EVENT_SUBSCRIPTION_FINALIZER]
    );

    ctx.provisioner
        .refuse_delete
        .store(false, std::sync::atomic::Ordering::SeqCst);
    reconcile_stored(&ctx).await;
    assert!(subscription_now(&ctx).is_none());
    assert_eq!(*ctx.provisioner.deleted.lock().unwrap(), ["sub-7", "sub-7"]);
}

#[tokio::test]
async fn a_lost_finalizer_race_is_a_conflict() {
    let ctx = context(SubscriptionAnswer::Done("sub-7".into()));
    let read = subscription_now(&ctx).unwrap();
    let mut changed = read.clone();
    changed.metadata.finalizers = Some(vec!["someone.else/finalizer".into()]);
    ctx.store.put(changed);
    let result = reconcile(&read, &ctx).await;
    assert!(
        matches!(
            result,
            Err(SubscriptionError::Store {
                source: StoreError::Conflict,
                ..
            })
        ),
        "{result:?}"
    );
}
