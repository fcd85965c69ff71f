//! The BMCEventSubscription controller against the real stack: Ironic's redfish
//! driver creates the subscription on the host's BMC, bmo records its id, deletes it
//! with the object, and keeps the header Secret's values out of its log and events.
//!
//! sushy-emulator 2.2.0 has no EventService (its service root has no link to one),
//! so against it the BMC refuses, and the user is told so. For the accepting BMC,
//! [`RedfishFront`] stands between Ironic and sushy-emulator: it forwards every
//! request to the emulator and adds an EventService with a Subscriptions collection
//! that records what it is sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bmo::api::{BMCEventSubscription, BareMetalHost};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::support::{
    BmoProcess, Stack, bmo_run, create_bmc_secret, eventually, installed_namespace, unique_mac,
    unique_name,
};

const SUBSCRIPTIONS: &str = "/redfish/v1/EventService/Subscriptions";

/// What the front's EventService holds and was asked.
#[derive(Default)]
struct Recorded {
    /// Id → the POSTed subscription, as sent.
    subscriptions: BTreeMap<String, Value>,
    /// Ids of the subscriptions DELETEd.
    deleted: Vec<String>,
}

struct Front {
    upstream: String,
    http: reqwest::Client,
    recorded: Mutex<Recorded>,
}

/// A Redfish BMC on loopback: sushy-emulator plus an EventService.
struct RedfishFront {
    addr: std::net::SocketAddr,
    front: Arc<Front>,
    serving: tokio::task::AbortHandle,
}

impl RedfishFront {
    async fn start(upstream: &str) -> RedfishFront {
        let front = Arc::new(Front {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            recorded: Mutex::default(),
        });
        let app = Router::new()
            .route("/redfish/v1", get(service_root))
            .route("/redfish/v1/", get(service_root))
            .route("/redfish/v1/EventService", get(event_service))
            .route(
                SUBSCRIPTIONS,
                get(subscription_collection).post(create_subscription),
            )
            .route(
                &format!("{SUBSCRIPTIONS}/{{id}}"),
                get(subscription).delete(delete_subscription),
            )
            .fallback(forward)
            .with_state(front.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the Redfish front");
        let addr = listener.local_addr().expect("local addr");
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        })
        .abort_handle();
        RedfishFront {
            addr,
            front,
            serving,
        }
    }

    fn subscriptions(&self) -> BTreeMap<String, Value> {
        self.front.recorded.lock().unwrap().subscriptions.clone()
    }

    fn deleted(&self) -> Vec<String> {
        self.front.recorded.lock().unwrap().deleted.clone()
    }
}

impl Drop for RedfishFront {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// Sends the request on to sushy-emulator as it came (headers, credentials, body).
async fn pass_on(front: &Front, request: Request) -> (StatusCode, HeaderMap, Vec<u8>) {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = front
        .http
        .request(parts.method.clone(), format!("{}{path}", front.upstream))
        .body(body.to_vec());
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let Ok(answer) = out.send().await else {
        return (StatusCode::BAD_GATEWAY, HeaderMap::new(), Vec::new());
    };
    let status = answer.status();
    let mut headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if name != header::TRANSFER_ENCODING
            && name != header::CONTENT_LENGTH
            && name != header::CONNECTION
        {
            headers.insert(name.clone(), value.clone());
        }
    }
    let body = answer.bytes().await.unwrap_or_default().to_vec();
    (status, headers, body)
}

async fn forward(State(front): State<Arc<Front>>, request: Request) -> Response {
    let (status, headers, body) = pass_on(&front, request).await;
    (status, headers, Body::from(body)).into_response()
}

/// The emulator's service root with a link to the EventService added.
async fn service_root(State(front): State<Arc<Front>>, request: Request) -> Response {
    let (status, mut headers, body) = pass_on(&front, request).await;
    let Ok(mut root) = serde_json::from_slice::<Value>(&body) else {
        return (status, headers, Body::from(body)).into_response();
    };
    root["EventService"] = json!({"@odata.id": "/redfish/v1/EventService"});
    headers.remove(header::CONTENT_LENGTH);
    (status, headers, axum::Json(root)).into_response()
}

async fn event_service() -> Response {
    axum::Json(json!({
        "@odata.id": "/redfish/v1/EventService",
        "@odata.type": "#EventService.v1_7_0.EventService",
        "Id": "EventService",
        "Name": "Event Service",
        "ServiceEnabled": true,
        "EventTypesForSubscription": ["Alert"],
        "Subscriptions": {"@odata.id": SUBSCRIPTIONS},
        "Actions": {"#EventService.SubmitTestEvent": {
            "target": "/redfish/v1/EventService/Actions/EventService.SubmitTestEvent"
        }}
    }))
    .into_response()
}

async fn subscription_collection(State(front): State<Arc<Front>>) -> Response {
    let recorded = front.recorded.lock().unwrap();
    let members: Vec<Value> = recorded
        .subscriptions
        .keys()
        .map(|id| json!({"@odata.id": format!("{SUBSCRIPTIONS}/{id}")}))
        .collect();
    axum::Json(json!({
        "@odata.id": SUBSCRIPTIONS,
        "@odata.type": "#EventDestinationCollection.EventDestinationCollection",
        "Name": "Event Subscriptions",
        "Members@odata.count": members.len(),
        "Members": members,
    }))
    .into_response()
}

/// A subscription as a BMC shows it: without the headers (Redfish hides them).
fn shown(id: &str, posted: &Value) -> Value {
    json!({
        "@odata.id": format!("{SUBSCRIPTIONS}/{id}"),
        "@odata.type": "#EventDestination.v1_0_0.EventDestination",
        "Id": id,
        "Name": format!("Subscription {id}"),
        "Destination": posted["Destination"],
        "Context": posted["Context"],
        "Protocol": posted["Protocol"],
        "EventTypes": posted["EventTypes"],
    })
}

async fn create_subscription(
    State(front): State<Arc<Front>>,
    axum::Json(posted): axum::Json<Value>,
) -> Response {
    let mut recorded = front.recorded.lock().unwrap();
    let id = format!("sub-{}", recorded.subscriptions.len() + 1);
    let body = shown(&id, &posted);
    recorded.subscriptions.insert(id.clone(), posted);
    (
        StatusCode::CREATED,
        [(header::LOCATION, format!("{SUBSCRIPTIONS}/{id}"))],
        axum::Json(body),
    )
        .into_response()
}

async fn subscription(State(front): State<Arc<Front>>, Path(id): Path<String>) -> Response {
    let recorded = front.recorded.lock().unwrap();
    match recorded.subscriptions.get(&id) {
        Some(posted) => axum::Json(shown(&id, posted)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn delete_subscription(State(front): State<Arc<Front>>, Path(id): Path<String>) -> Response {
    let mut recorded = front.recorded.lock().unwrap();
    recorded.deleted.push(id.clone());
    match recorded.subscriptions.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A Redfish host on system `system_index` of the emulator, reached at `authority`
/// (`host:port`), that registers and stays available.
async fn create_redfish_host(
    client: &kube::Client,
    ns: &str,
    name: &str,
    authority: &str,
    system_index: usize,
) {
    let stack = Stack::get();
    create_bmc_secret(
        client,
        ns,
        &format!("{name}-bmc"),
        &stack.redfish_credentials.username,
        stack.redfish_credentials.password.expose(),
    )
    .await;
    let system = &stack.redfish_system_ids[system_index];
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {
                "address": format!("redfish+http://{authority}/redfish/v1/Systems/{system}"),
                "credentialsName": format!("{name}-bmc")
            }
        }
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
}

/// The header Secret (two headers, values unique to the test) and its values.
async fn create_header_secret(client: &kube::Client, ns: &str) -> Vec<(String, String)> {
    let headers = vec![
        (
            "Authorization".to_owned(),
            format!("Bearer {}", unique_name("tok")),
        ),
        ("X-Api-Key".to_owned(), unique_name("key")),
    ];
    let mut secret = Secret::default();
    secret.metadata.name = Some("event-headers".into());
    secret.data = Some(
        headers
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create header Secret");
    headers
}

async fn create_subscription_object(
    client: &kube::Client,
    ns: &str,
    host: &str,
) -> BMCEventSubscription {
    let subscription: BMCEventSubscription = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BMCEventSubscription",
        "metadata": {"name": "events"},
        "spec": {
            "hostName": host,
            "destination": "http://127.0.0.1:9/events/",
            "context": format!("ctx-{ns}"),
            "httpHeadersRef": {"name": "event-headers", "namespace": ns}
        }
    }))
    .unwrap();
    Api::<BMCEventSubscription>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &subscription)
        .await
        .expect("create BMCEventSubscription")
}

/// Every Event message in `ns`.
async fn event_messages(client: &kube::Client, ns: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Deletes the subscription and waits until it is gone.
async fn delete_and_wait(client: &kube::Client, ns: &str, bmo: &BmoProcess) {
    let subscriptions: Api<BMCEventSubscription> = Api::namespaced(client.clone(), ns);
    subscriptions
        .delete("events", &DeleteParams::default())
        .await
        .expect("delete BMCEventSubscription");
    eventually(
        "the BMCEventSubscription to go away",
        Duration::from_secs(30),
        || async {
            match subscriptions.get_opt("events").await {
                Ok(None) => Ok(()),
                Ok(Some(s)) => Err(format!(
                    "still there: {:?} {:?}; log: {}",
                    s.finalizers(),
                    s.status,
                    bmo.log_tail(20)
                )),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
}

fn assert_no_header_values(what: &str, text: &str, headers: &[(String, String)]) {
    for (name, value) in headers {
        assert!(
            !text.contains(value.as_str()),
            "the value of header {name} appears in {what}"
        );
    }
}

#[tokio::test]
async fn subscription_is_created_on_the_bmc_and_deleted_with_the_object() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("bes").await;
    let stack = Stack::get();
    let front = RedfishFront::start(stack.redfish_url.as_str()).await;
    let (bmo, _) = bmo_run(&ns, &[("RUST_LOG", "debug")]);
    let headers = create_header_secret(&client, &ns).await;
    create_redfish_host(&client, &ns, "bmc-events", &front.addr.to_string(), 3).await;
    create_subscription_object(&client, &ns, "bmc-events").await;

    let subscriptions: Api<BMCEventSubscription> = Api::namespaced(client.clone(), &ns);
    let id = eventually("status.subscriptionID", Duration::from_secs(90), || async {
        let s = subscriptions
            .get("events")
            .await
            .map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        match status.subscription_id {
            Some(id) if !id.is_empty() => Ok(id),
            _ => Err(format!("{status:?}; log: {}", bmo.log_tail(20))),
        }
    })
    .await;

    let created = front.subscriptions();
    let posted = created.get(&id).unwrap_or_else(|| {
        panic!("status.subscriptionID {id} is not the id the BMC made: {created:?}")
    });
    assert_eq!(posted["Destination"], "http://127.0.0.1:9/events/");
    assert_eq!(posted["Context"], format!("ctx-{ns}"));
    let mut sent: Vec<(String, String)> = posted["HttpHeaders"]
        .as_array()
        .expect("HttpHeaders sent")
        .iter()
        .flat_map(|h| h.as_object().cloned().unwrap_or_default())
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
        .collect();
    sent.sort();
    assert_eq!(sent, headers);
    let stored = subscriptions.get("events").await.expect("get");
    assert_eq!(stored.status.clone().unwrap_or_default().error, None);
    assert!(
        stored
            .finalizers()
            .contains(&"bmceventsubscription.metal3.io".to_owned())
    );

    delete_and_wait(&client, &ns, &bmo).await;
    assert_eq!(front.deleted(), vec![id.clone()]);
    assert!(front.subscriptions().is_empty());

    let events = event_messages(&client, &ns).await;
    assert!(
        events
            .iter()
            .any(|(reason, m)| reason == "SubscriptionCreated" && m.contains(&id)),
        "{events:?}"
    );
    let all: String = events.iter().map(|(r, m)| format!("{r} {m}\n")).collect();
    assert_no_header_values("the Events", &all, &headers);
    assert_no_header_values("bmo's log", &bmo.log(), &headers);

    // No node in the shared Ironic is left pointing at the front once it is gone.
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    hosts
        .delete("bmc-events", &DeleteParams::default())
        .await
        .expect("delete host");
    eventually("the host to go away", Duration::from_secs(60), || async {
        match hosts.get_opt("bmc-events").await {
            Ok(None) => Ok(()),
            Ok(Some(h)) => Err(format!(
                "{}; log: {}",
                h.provisioning_state(),
                bmo.log_tail(20)
            )),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

#[tokio::test]
async fn a_bmc_without_an_event_service_is_reported_and_the_object_still_goes() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("bes-refused").await;
    let stack = Stack::get();
    let (bmo, _) = bmo_run(&ns, &[("RUST_LOG", "debug")]);
    let headers = create_header_secret(&client, &ns).await;
    let emulator = crate::support::authority(stack.redfish_url.as_str());
    create_redfish_host(&client, &ns, "plain-sushy", &emulator, 2).await;
    create_subscription_object(&client, &ns, "plain-sushy").await;

    let subscriptions: Api<BMCEventSubscription> = Api::namespaced(client.clone(), &ns);
    let error = eventually("status.error", Duration::from_secs(90), || async {
        let s = subscriptions
            .get("events")
            .await
            .map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        match status.error {
            Some(e) if !e.is_empty() => Ok(e),
            _ => Err(format!("{status:?}; log: {}", bmo.log_tail(20))),
        }
    })
    .await;
    eprintln!("status.error: {error}");
    // Names the host, the BMC, what was refused and the fix.
    for part in [
        format!("BareMetalHost {ns}/plain-sushy"),
        format!("redfish+http://{emulator}/redfish/v1/Systems/"),
        "EventService".to_owned(),
        "Fix:".to_owned(),
    ] {
        assert!(error.contains(&part), "{part:?} missing from: {error}");
    }
    let stored = subscriptions.get("events").await.expect("get");
    assert_eq!(
        stored.status.clone().unwrap_or_default().subscription_id,
        None
    );
    let events = eventually("the refusal's Event", Duration::from_secs(10), || async {
        let events = event_messages(&client, &ns).await;
        if events
            .iter()
            .any(|(reason, m)| reason == "SubscriptionFailed" && *m == error)
        {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    let all: String = events.iter().map(|(r, m)| format!("{r} {m}\n")).collect();
    assert_no_header_values("the Events", &all, &headers);
    assert_no_header_values("status.error", &error, &headers);

    // Nothing was made on the BMC, so nothing holds the object.
    delete_and_wait(&client, &ns, &bmo).await;
    assert_no_header_values("bmo's log", &bmo.log(), &headers);
}
