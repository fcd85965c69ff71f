//! Seams where one controller acts for another kind. The runtime names them so that
//! neither controller imports the other; `crate::run` connects the two.

use std::time::Duration;

use futures::future::BoxFuture;

use super::Next;
use crate::api::BareMetalHost;
use crate::bmc::AddressGuard;

/// What must happen before a provisioned host powers on: the DataImage controller
/// attaches, changes or ejects the host's DataImage, so the host boots with it.
pub trait BeforePowerOn<P>: Send + Sync {
    /// `None`: power `host` on now; `Some(next)`: hold the power-on until then. A
    /// URL `guard` refuses is a failure of the other object, never sent on.
    fn before_power_on<'a>(
        &'a self,
        host: &'a BareMetalHost,
        provisioner: &'a P,
        guard: &'a AddressGuard,
        max_backoff: Duration,
    ) -> BoxFuture<'a, Result<Option<Next>, SeamError>>;
}

/// Why the other controller's part could not finish.
pub use super::store::ObjectError as SeamError;
