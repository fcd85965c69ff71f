//! The controllers: one folder per kind, over one shared [`runtime`].
//!
//! Each controller is its pure state machine (what to do next, from what is known),
//! its store (every Kubernetes read and write it makes) and its wiring on the
//! runtime (what wakes it, how it backs off). A controller imports the runtime and
//! the layers below it (api, provisioner, netboot), never another controller: where
//! one kind acts for another (the host attaching its DataImage before power-on),
//! the runtime names the seam and `crate::run` connects them.

pub mod claims;
pub mod dataimage;
pub mod discovery;
pub mod event_subscriptions;
pub mod firmware;
pub mod host;
pub mod preprov_image;
pub mod runtime;
pub mod switches;

#[cfg(test)]
mod layering;
