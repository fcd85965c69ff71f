//! Calls on node records: create, read, list, patch, delete, and their provision,
//! power, maintenance and RAID states.

use reqwest::Method;
use serde_json::{Value, json};

use super::client::IronicClient;
use super::error::{IronicError, unless_not_found};
use super::types::{
    Microversion, Node, NodeCreate, PatchOp, PowerTarget, ProvisionRequest, ProvisionTarget,
};

/// Nodes per page of [`IronicClient::list_node_fields`].
const NODE_PAGE: usize = 500;

/// Nodes per page of [`IronicClient::list_nodes_by_provision_change`]: those are
/// mostly short (the nodes that moved in the last seconds).
const CHANGED_NODE_PAGE: usize = 100;

#[derive(serde::Deserialize)]
struct NodeList {
    nodes: Vec<Node>,
}

impl IronicClient {
    /// A node by UUID or name; `None` when Ironic has no such node.
    pub async fn get_node(&self, ident: &str) -> Result<Option<Node>, IronicError> {
        Ok(unless_not_found(self.get(&["nodes", ident]).await)?.flatten())
    }

    /// All nodes, with full details.
    pub async fn list_nodes(&self) -> Result<Vec<Node>, IronicError> {
        let list: Option<NodeList> = self.get(&["nodes", "detail"]).await?;
        Ok(list.map(|l| l.nodes).unwrap_or_default())
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
        if self.microversion() < Microversion::new(1, 95) {
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

    pub async fn create_node(&self, node: &NodeCreate) -> Result<Node, IronicError> {
        self.call(Method::POST, &["nodes"], Some(node))
            .await?
            .ok_or_else(|| self.decode_error(&Method::POST, "nodes", "empty answer"))
    }

    /// Deletes a node; a node that is already gone counts as deleted.
    pub async fn delete_node(&self, ident: &str) -> Result<(), IronicError> {
        let deleted = self
            .call::<Value, ()>(Method::DELETE, &["nodes", ident], None)
            .await;
        unless_not_found(deleted).map(drop)
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
}
