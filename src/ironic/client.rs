use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use url::Url;

use super::error::{IronicError, fault_string, without_credentials};
use super::types::{
    BiosSetting, BiosSettingList, FirmwareComponent, FirmwareComponentList, Microversion, Node,
    NodeCreate, PatchOp, Port, PowerTarget, ProvisionRequest, ProvisionTarget, VirtualMedia,
};
use crate::credentials::{Credentials, SecretString};

/// The oldest Ironic API bmo talks to (the same floor as upstream metal3).
pub const MIN_MICROVERSION: Microversion = Microversion::new(1, 89);
/// The newest microversion bmo knows the behaviour of; it asks for no more than this.
const MAX_MICROVERSION: Microversion = Microversion::new(1, 95);
/// The first microversion that reads a node's virtual media (`GET .../vmedia`).
const GET_VMEDIA: Microversion = Microversion::new(1, 93);
const VERSION_HEADER: &str = "X-OpenStack-Ironic-API-Version";

/// How bmo authenticates to Ironic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IronicAuth {
    None,
    Basic(Credentials),
}

impl IronicAuth {
    /// Reads upstream's layout: `DIR/ironic/username` and `DIR/ironic/password`. Both
    /// absent means no authentication; one without the other is an error.
    pub fn from_auth_dir(dir: &Path) -> Result<Self, IronicError> {
        let user_file = dir.join("ironic").join("username");
        let pass_file = dir.join("ironic").join("password");
        let read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(s) => Ok(Some(s.trim_end_matches(['\r', '\n']).to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(IronicError::Setup(format!(
                "cannot read {}: {e}",
                p.display()
            ))),
        };
        match (read(&user_file)?, read(&pass_file)?) {
            (None, None) => Ok(Self::None),
            (Some(username), Some(password)) => Ok(Self::Basic(Credentials {
                username,
                password: SecretString::new(password),
            })),
            (Some(_), None) => Err(IronicError::Setup(format!(
                "{} exists but {} does not; provide both or neither",
                user_file.display(),
                pass_file.display()
            ))),
            (None, Some(_)) => Err(IronicError::Setup(format!(
                "{} exists but {} does not; provide both or neither",
                pass_file.display(),
                user_file.display()
            ))),
        }
    }
}

/// Everything needed to build an [`IronicClient`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root including `/v1/`.
    pub endpoint: Url,
    pub auth: IronicAuth,
    pub ca_file: Option<PathBuf>,
    pub insecure: bool,
    pub timeout: Duration,
    /// Attempts for a call Ironic answers with 409 (node locked) or 503.
    pub max_attempts: u32,
    pub retry_base_delay: Duration,
}

impl ClientConfig {
    pub fn new(endpoint: Url) -> Self {
        Self {
            endpoint,
            auth: IronicAuth::None,
            ca_file: None,
            insecure: false,
            timeout: Duration::from_secs(60),
            max_attempts: 8,
            retry_base_delay: Duration::from_millis(500),
        }
    }
}

/// A connected Ironic API client with a negotiated microversion.
#[derive(Debug, Clone)]
pub struct IronicClient {
    http: reqwest::Client,
    endpoint: Url,
    auth: IronicAuth,
    microversion: Microversion,
    max_attempts: u32,
    retry_base_delay: Duration,
    /// Requests answered "node locked" (409) or 503 and sent again, for tests and metrics.
    busy_retries: Arc<AtomicU64>,
    /// When each node (by the UUID or name a request used) was last written to
    /// through this client (or its clones): a list taken before that is out of date
    /// for the node.
    node_writes: Arc<Mutex<HashMap<String, Instant>>>,
}

/// How long a write is remembered for [`IronicClient::last_write`]; lists older
/// than this are not used.
const NODE_WRITE_MEMORY: Duration = Duration::from_secs(120);

/// Nodes per page of [`IronicClient::list_node_fields`].
const NODE_PAGE: usize = 500;

/// Nodes per page of [`IronicClient::list_nodes_by_provision_change`]: those are
/// mostly short (the nodes that moved in the last seconds).
const CHANGED_NODE_PAGE: usize = 100;

#[derive(serde::Deserialize)]
struct VersionDoc {
    version: VersionInfo,
}

#[derive(serde::Deserialize)]
struct VersionInfo {
    version: String,
}

#[derive(serde::Deserialize)]
struct PortList {
    ports: Vec<Port>,
}

#[derive(serde::Deserialize)]
struct NodeList {
    nodes: Vec<Node>,
}

/// How long an idle connection to Ironic is kept for the next request: under the
/// time after which Ironic's servers close one (cheroot, Ironic's own: 10 s; Apache
/// httpd's default: 5 s). A request sent on a connection as the server closes it
/// fails ("connection closed before message completed") and costs a retry.
const IDLE_CONNECTION: Duration = Duration::from_secs(4);

impl IronicClient {
    /// Builds the HTTP client, negotiates the microversion with Ironic and checks that
    /// Ironic accepts the credentials.
    pub async fn connect(config: ClientConfig) -> Result<Self, IronicError> {
        let mut endpoint = config.endpoint.clone();
        if !endpoint.path().ends_with('/') {
            endpoint.set_path(&format!("{}/", endpoint.path()));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(IDLE_CONNECTION)
            .user_agent(concat!("bmo/", env!("CARGO_PKG_VERSION")));
        // Trust: the CA file alone when one is given (as upstream uses it), none for
        // plain HTTP, else the system's roots. Only the last needs a CA bundle on the
        // machine, which an appliance or an air-gapped node may not have.
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                IronicError::Setup(format!("cannot read Ironic CA file {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                IronicError::Setup(format!("Ironic CA file {} is not PEM: {e}", ca.display()))
            })?;
            builder = builder.tls_certs_only(certs);
        } else if endpoint.scheme() == "http" {
            builder = builder.tls_certs_only([]);
        }
        if config.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let http = builder.build().map_err(|e| {
            IronicError::Setup(format!(
                "{} (for an https IRONIC_ENDPOINT without IRONIC_CACERT_FILE, the system's CA \
                 certificates are used: install them, e.g. Debian's ca-certificates, or set \
                 IRONIC_CACERT_FILE)",
                crate::telemetry::with_causes(&e)
            ))
        })?;
        let mut client = Self {
            http,
            endpoint,
            auth: config.auth,
            microversion: MIN_MICROVERSION,
            max_attempts: config.max_attempts.max(1),
            retry_base_delay: config.retry_base_delay,
            busy_retries: Arc::default(),
            node_writes: Arc::default(),
        };
        client.microversion = client.negotiate().await?;
        // The version document is public; a small authenticated read proves the
        // credentials now rather than at the first host.
        client
            .call_with_query::<Value, ()>(
                Method::GET,
                &["nodes"],
                &[("limit", "1"), ("fields", "uuid")],
                None,
            )
            .await?;
        Ok(client)
    }

    /// The microversion sent with every request.
    pub fn microversion(&self) -> Microversion {
        self.microversion
    }

    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// How many requests this client (and its clones) sent again because Ironic said
    /// the node was locked (409) or it was unavailable (503).
    pub fn busy_retries(&self) -> u64 {
        self.busy_retries.load(Ordering::Relaxed)
    }

    async fn negotiate(&self) -> Result<Microversion, IronicError> {
        let doc: VersionDoc = self
            .get(&[])
            .await?
            .ok_or_else(|| self.decode_error(&Method::GET, "", "empty version document"))?;
        let max: Microversion = doc
            .version
            .version
            .parse()
            .map_err(|e: String| self.decode_error(&Method::GET, "", &e))?;
        if max < MIN_MICROVERSION {
            return Err(IronicError::MicroversionTooOld {
                endpoint: without_credentials(&self.endpoint),
                max,
                needed: MIN_MICROVERSION,
            });
        }
        Ok(max.min(MAX_MICROVERSION))
    }

    fn decode_error(&self, method: &Method, path: &str, detail: &str) -> IronicError {
        IronicError::Decode {
            method: method.to_string(),
            path: format!("/{path}"),
            detail: detail.to_owned(),
        }
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends one request, retrying 409 and 503 with jittered exponential backoff.
    /// `Ok(None)` is an empty (204) answer.
    async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&B>,
    ) -> Result<Option<T>, IronicError> {
        self.call_with_query(method, segments, &[], body).await
    }

    /// No answer from Ironic; the error names the endpoint without its credentials.
    fn unreachable(&self, source: reqwest::Error) -> IronicError {
        IronicError::Unreachable {
            endpoint: without_credentials(&self.endpoint),
            source: source.without_url(),
        }
    }

    /// A `GET` of a document; `None` when the answer is empty.
    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<Option<T>, IronicError> {
        self.get_with_query(segments, &[]).await
    }

    async fn get_with_query<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<Option<T>, IronicError> {
        self.call_with_query(Method::GET, segments, query, Option::<&()>::None)
            .await
    }

    /// A `PUT` whose answer, if any, is not needed.
    async fn put<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<(), IronicError> {
        self.call::<Value, _>(Method::PUT, segments, Some(body))
            .await
            .map(drop)
    }

    /// When a request through this client last wrote to the node `ident` (UUID or
    /// name, as the request named it), if within [`NODE_WRITE_MEMORY`].
    pub fn last_write(&self, ident: &str) -> Option<Instant> {
        let writes = self
            .node_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        writes.get(ident).copied()
    }

    /// Every node with only `fields`, one page of [`NODE_PAGE`] nodes per request.
    /// `uuid` is always among the fields (it is the paging marker).
    pub async fn list_node_fields(&self, fields: &[&str]) -> Result<Vec<Node>, IronicError> {
        self.page_nodes(fields, &[], NODE_PAGE, |_| true).await
    }

    /// The nodes whose provision state changed last first, with only `fields`
    /// (`provision_updated_at` is always among them), up to the first that `newer`
    /// refuses (which is left out, as are the rest) or the last one.
    pub async fn list_nodes_by_provision_change(
        &self,
        fields: &[&str],
        newer: impl Fn(&Node) -> bool,
    ) -> Result<Vec<Node>, IronicError> {
        let mut fields = fields.to_vec();
        if !fields.contains(&"provision_updated_at") {
            fields.push("provision_updated_at");
        }
        let order = [("sort_key", "provision_updated_at"), ("sort_dir", "desc")];
        self.page_nodes(&fields, &order, CHANGED_NODE_PAGE, newer)
            .await
    }

    /// Nodes with only `fields`, in the order `order` asks, `page` per request, up to
    /// the first one `wanted` refuses.
    async fn page_nodes(
        &self,
        fields: &[&str],
        order: &[(&str, &str)],
        page: usize,
        wanted: impl Fn(&Node) -> bool,
    ) -> Result<Vec<Node>, IronicError> {
        let mut fields: Vec<&str> = fields.to_vec();
        // Ironic refuses fields newer than the microversion in use.
        if self.microversion < Microversion::new(1, 95) {
            fields.retain(|f| *f != "disable_power_off");
        }
        if !fields.contains(&"uuid") {
            fields.push("uuid");
        }
        let fields = fields.join(",");
        let limit = page.to_string();
        let mut nodes: Vec<Node> = Vec::new();
        loop {
            let marker = nodes.last().map(|n| n.uuid.clone());
            let mut query = vec![("fields", fields.as_str()), ("limit", limit.as_str())];
            query.extend_from_slice(order);
            if let Some(marker) = marker.as_deref() {
                query.push(("marker", marker));
            }
            let listed: Option<NodeList> = self.get_with_query(&["nodes"], &query).await?;
            let listed = listed.map(|l| l.nodes).unwrap_or_default();
            let last_page = listed.len() < page;
            let count = listed.len();
            let before = nodes.len();
            nodes.extend(listed.into_iter().take_while(&wanted));
            let refused = nodes.len() - before < count;
            if last_page || refused {
                return Ok(nodes);
            }
        }
    }

    /// Records a write to the node a request to `segments` names, if any.
    fn record_node_write(&self, method: &Method, segments: &[&str]) {
        if *method == Method::GET {
            return;
        }
        let [first, ident, ..] = segments else {
            return;
        };
        if *first != "nodes" {
            return;
        }
        let now = Instant::now();
        let mut writes = self
            .node_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        writes.retain(|_, at| now.duration_since(*at) < NODE_WRITE_MEMORY);
        writes.insert((*ident).to_owned(), now);
    }

    async fn call_with_query<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Option<T>, IronicError> {
        let result = self.send(method.clone(), segments, query, body).await;
        // Recorded once the answer is in, whatever it is: a list taken after this
        // shows the write's effect.
        self.record_node_write(&method, segments);
        result
    }

    async fn send<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Option<T>, IronicError> {
        let url = self.url(segments);
        let path = segments.join("/");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .header(VERSION_HEADER, self.microversion.to_string());
            if !query.is_empty() {
                req = req.query(query);
            }
            if let IronicAuth::Basic(creds) = &self.auth {
                req = req.basic_auth(&creds.username, Some(creds.password.expose()));
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            let resp = req.send().await.map_err(|e| self.unreachable(e))?;
            let status = resp.status();
            if status.is_success() {
                let bytes = resp.bytes().await.map_err(|e| self.unreachable(e))?;
                if status == StatusCode::NO_CONTENT || bytes.is_empty() {
                    return Ok(None);
                }
                return serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| self.decode_error(&method, &path, &e.to_string()));
            }
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                return Err(IronicError::Unauthorized {
                    endpoint: without_credentials(&self.endpoint),
                    status,
                });
            }
            let text = resp.text().await.unwrap_or_default();
            // 409 also means "wrong state" (InvalidState), which waiting does not fix;
            // only a lock held by a conductor goes away by itself.
            let retryable = status == StatusCode::SERVICE_UNAVAILABLE
                || (status == StatusCode::CONFLICT && is_locked_message(&text));
            if retryable && attempt < self.max_attempts {
                self.busy_retries.fetch_add(1, Ordering::Relaxed);
                let delay = jittered_backoff(self.retry_base_delay, attempt);
                tracing::debug!(%status, attempt, ?delay, path = %path, "Ironic busy, retrying");
                tokio::time::sleep(delay).await;
                continue;
            }
            return Err(IronicError::Api {
                method: method.to_string(),
                path: format!("/{path}"),
                status,
                message: fault_string(&text),
            });
        }
    }

    /// A node by UUID or name; `None` when Ironic has no such node.
    pub async fn get_node(&self, ident: &str) -> Result<Option<Node>, IronicError> {
        match self.get(&["nodes", ident]).await {
            Ok(node) => Ok(node),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// All nodes, with full details.
    pub async fn list_nodes(&self) -> Result<Vec<Node>, IronicError> {
        let list: Option<NodeList> = self.get(&["nodes", "detail"]).await?;
        Ok(list.map(|l| l.nodes).unwrap_or_default())
    }

    pub async fn create_node(&self, node: &NodeCreate) -> Result<Node, IronicError> {
        self.call(Method::POST, &["nodes"], Some(node))
            .await?
            .ok_or_else(|| self.decode_error(&Method::POST, "nodes", "empty answer"))
    }

    /// Deletes a node; a node that is already gone counts as deleted.
    pub async fn delete_node(&self, ident: &str) -> Result<(), IronicError> {
        match self
            .call::<Value, ()>(Method::DELETE, &["nodes", ident], None)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn set_provision_state(
        &self,
        ident: &str,
        target: ProvisionTarget,
    ) -> Result<(), IronicError> {
        self.put(
            &["nodes", ident, "states", "provision"],
            &json!({ "target": target }),
        )
        .await
    }

    pub async fn set_power_state(
        &self,
        ident: &str,
        target: PowerTarget,
        timeout_secs: Option<u32>,
    ) -> Result<(), IronicError> {
        let mut body = json!({ "target": target });
        if let Some(t) = timeout_secs {
            body["timeout"] = json!(t);
        }
        self.put(&["nodes", ident, "states", "power"], &body).await
    }

    /// `PATCH /v1/nodes/{id}` with a JSON patch.
    pub async fn patch_node(&self, ident: &str, ops: &[PatchOp]) -> Result<Node, IronicError> {
        self.call(Method::PATCH, &["nodes", ident], Some(ops))
            .await?
            .ok_or_else(|| self.decode_error(&Method::PATCH, "nodes", "empty answer"))
    }

    /// A provision state change with clean steps, deploy steps or a config drive.
    pub async fn change_provision_state(
        &self,
        ident: &str,
        request: &ProvisionRequest,
    ) -> Result<(), IronicError> {
        self.put(&["nodes", ident, "states", "provision"], request)
            .await
    }

    /// `{inventory, plugin_data}` from the last inspection; `None` when there is none.
    pub async fn get_inventory(&self, ident: &str) -> Result<Option<Value>, IronicError> {
        match self.get(&["nodes", ident, "inventory"]).await {
            Ok(doc) => Ok(doc),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/nodes/{id}/validate`: per interface `{result, reason}`.
    pub async fn validate_node(&self, ident: &str) -> Result<Value, IronicError> {
        Ok(self
            .get(&["nodes", ident, "validate"])
            .await?
            .unwrap_or(Value::Null))
    }

    pub async fn set_maintenance(&self, ident: &str, reason: &str) -> Result<(), IronicError> {
        self.put(
            &["nodes", ident, "maintenance"],
            &json!({ "reason": reason }),
        )
        .await
    }

    pub async fn clear_maintenance(&self, ident: &str) -> Result<(), IronicError> {
        self.call::<Value, ()>(Method::DELETE, &["nodes", ident, "maintenance"], None)
            .await
            .map(drop)
    }

    /// `PUT /v1/nodes/{id}/states/raid`: the target RAID configuration.
    pub async fn set_target_raid_config(
        &self,
        ident: &str,
        config: &Value,
    ) -> Result<(), IronicError> {
        self.put(&["nodes", ident, "states", "raid"], config).await
    }

    /// `GET /v1/nodes/{id}/management/boot_device`: asks the BMC itself (Ironic does
    /// not answer from a cache), so it proves that Ironic can talk to the BMC.
    pub async fn get_boot_device(&self, ident: &str) -> Result<Value, IronicError> {
        Ok(self
            .get(&["nodes", ident, "management", "boot_device"])
            .await?
            .unwrap_or(Value::Null))
    }

    /// The node's BIOS settings with their registry details, as Ironic last cached
    /// them from the BMC; `None` when Ironic has no such node.
    pub async fn get_bios(&self, ident: &str) -> Result<Option<Vec<BiosSetting>>, IronicError> {
        let list: Result<Option<BiosSettingList>, IronicError> = self
            .get_with_query(&["nodes", ident, "bios"], &[("detail", "True")])
            .await;
        match list {
            Ok(list) => Ok(Some(list.map(|l| l.bios).unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's firmware components (BIOS, BMC, NICs) with their versions, as
    /// Ironic last cached them from the BMC (on verify, inspection and cleaning);
    /// `None` when Ironic has no such node. Needs microversion 1.86 (bmo's floor is
    /// above it).
    pub async fn get_firmware(
        &self,
        ident: &str,
    ) -> Result<Option<Vec<FirmwareComponent>>, IronicError> {
        let list: Result<Option<FirmwareComponentList>, IronicError> =
            self.get(&["nodes", ident, "firmware"]).await;
        match list {
            Ok(list) => Ok(Some(list.map(|l| l.firmware).unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/nodes/{id}/vmedia` (microversion 1.93): the node's virtual media
    /// devices as its BMC reports them; `None` when Ironic has no such node.
    pub async fn get_virtual_media(
        &self,
        ident: &str,
    ) -> Result<Option<Vec<VirtualMedia>>, IronicError> {
        if self.microversion < GET_VMEDIA {
            return Err(IronicError::MicroversionTooOld {
                endpoint: without_credentials(&self.endpoint),
                max: self.microversion,
                needed: GET_VMEDIA,
            });
        }
        match self.get(&["nodes", ident, "vmedia"]).await {
            Ok(list) => Ok(Some(list.unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's history (`GET /v1/nodes/{id}/history`): events such as the start
    /// and end of each cleaning with the steps it ran, oldest first.
    pub async fn node_history(&self, ident: &str) -> Result<Vec<Value>, IronicError> {
        let list: Option<Value> = self.get(&["nodes", ident, "history"]).await?;
        Ok(list
            .and_then(|mut l| l.get_mut("history").map(Value::take))
            .and_then(|h| match h {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .unwrap_or_default())
    }

    /// `POST /v1/nodes/{id}/vmedia`: starts inserting `image_url` as the node's
    /// virtual CD. Ironic answers at once; the conductor downloads the image, serves
    /// it from its own HTTP server and inserts it in the background, and a failure
    /// ends up in the node's `last_error`.
    pub async fn attach_virtual_media(
        &self,
        ident: &str,
        image_url: &str,
    ) -> Result<(), IronicError> {
        self.call::<Value, _>(
            Method::POST,
            &["nodes", ident, "vmedia"],
            Some(&json!({ "device_type": "cdrom", "image_url": image_url })),
        )
        .await
        .map(drop)
    }

    /// `DELETE /v1/nodes/{id}/vmedia?device_types=cdrom`: starts ejecting the
    /// node's virtual CD (in the background, as attaching).
    pub async fn detach_virtual_media(&self, ident: &str) -> Result<(), IronicError> {
        self.call_with_query::<Value, ()>(
            Method::DELETE,
            &["nodes", ident, "vmedia"],
            &[("device_types", "cdrom")],
            None,
        )
        .await
        .map(drop)
    }

    /// `{POST,DELETE,GET} /v1/nodes/{id}/vendor_passthru?method=METHOD`: a driver's own
    /// call (the redfish driver's event subscriptions). Its answer, if any.
    pub async fn vendor_passthru(
        &self,
        ident: &str,
        http_method: Method,
        method: &str,
        body: &Value,
    ) -> Result<Option<Value>, IronicError> {
        self.call_with_query(
            http_method,
            &["nodes", ident, "vendor_passthru"],
            &[("method", method)],
            Some(body),
        )
        .await
    }

    /// The ports of one node.
    pub async fn list_node_ports(&self, node_uuid: &str) -> Result<Vec<Port>, IronicError> {
        let list: Option<PortList> = self
            .get_with_query(&["ports", "detail"], &[("node_uuid", node_uuid)])
            .await?;
        Ok(list.map(|l| l.ports).unwrap_or_default())
    }

    /// `POST /v1/continue_inspection`: what the inspection ramdisk sends when it has
    /// collected the inventory (tests play the ramdisk with it).
    pub async fn continue_inspection(&self, body: &Value) -> Result<Value, IronicError> {
        Ok(self
            .call(Method::POST, &["continue_inspection"], Some(body))
            .await?
            .unwrap_or(Value::Null))
    }

    pub async fn create_port(&self, node_uuid: &str, mac: &str) -> Result<Port, IronicError> {
        self.call(
            Method::POST,
            &["ports"],
            Some(&json!({ "node_uuid": node_uuid, "address": mac })),
        )
        .await?
        .ok_or_else(|| self.decode_error(&Method::POST, "ports", "empty answer"))
    }

    /// The port with this MAC address, if any node has one.
    pub async fn find_port_by_mac(&self, mac: &str) -> Result<Option<Port>, IronicError> {
        let list: Option<PortList> = self
            .get_with_query(&["ports", "detail"], &[("address", mac)])
            .await?;
        Ok(list.and_then(|l| l.ports.into_iter().next()))
    }
}

/// Whether a 409 body is Ironic's NodeLocked ("Node X is locked by host Y, please
/// retry after the current operation is completed.").
fn is_locked_message(body: &str) -> bool {
    let message = fault_string(body).to_ascii_lowercase();
    message.contains("is locked by") || message.contains("please retry")
}

/// `base * 2^(attempt-1)`, capped at 30 s, scaled by a random factor in [0.5, 1.5) so
/// that many callers retrying the same locked node spread out.
fn jittered_backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exp.min(Duration::from_secs(30));
    let random = std::hash::RandomState::new().build_hasher().finish();
    let factor = 0.5 + (random % 1000) as f64 / 1000.0;
    capped.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_bounded() {
        let base = Duration::from_millis(100);
        for attempt in 1..40 {
            let d = jittered_backoff(base, attempt);
            assert!(d <= Duration::from_secs(45), "attempt {attempt}: {d:?}");
            let nominal = base
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(Duration::from_secs(30));
            assert!(
                d >= nominal / 2,
                "attempt {attempt}: {d:?} < half of {nominal:?}"
            );
        }
    }

    #[test]
    fn only_a_lock_conflict_is_worth_waiting_for() {
        let locked = r#"{"error_message": "{\"faultstring\": \"Node 1be26c0b is locked by host bmo-test-conductor, please retry after the current operation is completed.\", \"faultcode\": \"Client\"}"}"#;
        assert!(is_locked_message(locked));
        let wrong_state = r#"{"error_message": "{\"faultstring\": \"The requested action \\\"deleted\\\" can not be performed on node \\\"x\\\" while it is in state \\\"enroll\\\".\", \"faultcode\": \"Client\"}"}"#;
        assert!(!is_locked_message(wrong_state));
    }

    #[test]
    fn auth_dir_reads_both_files_or_neither() {
        let dir = std::env::temp_dir().join(format!("bmo-auth-test-{}", std::process::id()));
        let ironic = dir.join("ironic");
        std::fs::create_dir_all(&ironic).unwrap();
        assert_eq!(IronicAuth::from_auth_dir(&dir).unwrap(), IronicAuth::None);
        std::fs::write(ironic.join("username"), "bmo\n").unwrap();
        let err = IronicAuth::from_auth_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("password"), "{err}");
        std::fs::write(ironic.join("password"), "s3cret\n").unwrap();
        match IronicAuth::from_auth_dir(&dir).unwrap() {
            IronicAuth::Basic(c) => {
                assert_eq!(c.username, "bmo");
                assert_eq!(c.password.expose(), "s3cret");
            }
            other => panic!("expected basic auth, got {other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
