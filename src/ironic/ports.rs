//! Calls on ports (a node's network interfaces, by MAC address).

use reqwest::Method;
use serde_json::json;

use super::client::IronicClient;
use super::error::IronicError;
use super::types::Port;

#[derive(serde::Deserialize)]
struct PortList {
    ports: Vec<Port>,
}

impl IronicClient {
    /// The ports of one node.
    pub async fn list_node_ports(&self, node_uuid: &str) -> Result<Vec<Port>, IronicError> {
        let list: Option<PortList> = self
            .get_with_query(&["ports", "detail"], &[("node_uuid", node_uuid)])
            .await?;
        Ok(list.map(|l| l.ports).unwrap_or_default())
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
