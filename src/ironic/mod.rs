//! Ironic REST client: authentication, microversion negotiation, retries and typed
//! calls. It knows Ironic's API and nothing about Kubernetes.

mod client;
mod config;
mod error;
mod node_details;
mod nodes;
mod ports;
mod reachability;
mod settings;
mod types;

pub use client::{IronicClient, MIN_MICROVERSION};
pub use config::{ClientConfig, IronicAuth};
pub use error::{IronicError, without_credentials};
pub use reachability::{Probe, Reachability};
pub use settings::{DEFAULT_IRONIC_ENDPOINT, IronicSettings};
pub use types::{
    BiosSetting, FirmwareComponent, Microversion, Node, NodeCreate, PatchOp, Port, PowerTarget,
    ProvisionRequest, ProvisionState, ProvisionTarget, VirtualMedia,
};
