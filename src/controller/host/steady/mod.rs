//! Hosts at rest, watched through one list of nodes rather than a timed look each.
//!
//! A reconcile that ends with nothing to do until something changes (a provisioned or
//! available host with its power as asked) records the node's state digest as its
//! registration saw it ([`crate::provisioner::Registration::node_state`]). Every
//! steady interval (`BMO_STEADY_POLL`) the poller lists every node once and wakes the
//! hosts whose node's digest moved (power, provision state, maintenance, an error, …)
//! or whose node vanished. Everything else that concerns a host at rest wakes it
//! through a watch (its spec and annotations, its Secret, DHCP, firmware settings).

mod hosts;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use crate::api::BareMetalHost;
use crate::provisioner::Provisioner;
pub use hosts::SteadyHosts;

/// Every `interval`, the hosts at rest whose node changed or vanished (one list of
/// nodes, none while no host rests).
pub(super) fn changed_hosts<P: Provisioner + 'static>(
    ctx: Arc<Context<P>>,
    interval: Duration,
) -> impl futures::Stream<Item = ObjectRef<BareMetalHost>> + Send + use<P> {
    let polls = futures::stream::unfold(ctx, move |ctx| async move {
        loop {
            tokio::time::sleep(interval).await;
            if ctx.steady.is_empty() {
                continue;
            }
            match ctx.provisioner.node_states().await {
                Ok(states) => {
                    let woken = ctx.steady.changed(&states);
                    if !woken.is_empty() {
                        tracing::info!(
                            hosts = woken.len(),
                            "nodes at rest changed or vanished; looking at their hosts"
                        );
                        return Some((woken, ctx));
                    }
                }
                // Hosts stay watched; the next poll compares again.
                Err(e) => tracing::warn!(
                    error = %crate::telemetry::with_causes(&e),
                    "could not list nodes to watch hosts at rest; trying again in {} s",
                    interval.as_secs()
                ),
            }
        }
    });
    polls.flat_map(futures::stream::iter)
}
