//! Ironic REST client: authentication, microversion negotiation, retries and typed
//! calls. It knows Ironic's API and nothing about Kubernetes.

mod client;
mod error;
mod settings;
mod types;

pub use client::{ClientConfig, IronicAuth, IronicClient, MIN_MICROVERSION};
pub use error::{IronicError, without_credentials};
pub use settings::{DEFAULT_IRONIC_ENDPOINT, IronicSettings};
pub use types::{
    BiosSetting, FirmwareComponent, Microversion, Node, NodeCreate, PatchOp, Port, PowerTarget,
    ProvisionRequest, ProvisionState, ProvisionTarget, VirtualMedia,
};
