//! A reconcile in steps, as the kinds with a pure state machine run it: the machine
//! decides one step from the facts gathered so far, the reconcile takes it, and so
//! on until a step ends it (or [`MAX_STEPS`] are taken); how it ends when the machine says so
//! in the common terms: nothing to do, the finalizer set or removed, or the status
//! saved with an event ([`Outcome`], written by [`finish`]).

use std::time::Duration;

use super::Next;
use super::store::{HostEvent, Kind, ObjectStore, StoreError};

/// Steps one reconcile takes at most (each a read, a write or a call); more means
/// the objects keep changing under it, and it looks again shortly.
pub const MAX_STEPS: usize = 10;

/// Look again this soon after the provisioner could not answer (upstream's delay).
pub const PROVISIONER_RETRY: Duration = Duration::from_secs(30);

/// When to look again after a reconcile took its steps and none ended it: shortly.
pub const OUT_OF_STEPS: Next = Next::After(Duration::from_secs(1));

/// How a reconcile ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<S> {
    /// Nothing until the object (or what wakes it) changes.
    Idle,
    /// Add (`true`) or remove the finalizer; the write wakes the next reconcile.
    Finalizer(bool),
    /// Save the status and publish `event`; look again after `retry` (`None`: only
    /// a change can help).
    Save {
        status: S,
        event: Option<HostEvent>,
        retry: Option<Duration>,
    },
}

/// A status with one error message.
pub trait HasError {
    fn error_mut(&mut self) -> &mut Option<String>;
}

impl<S: HasError> Outcome<S> {
    /// `message` saved as the error, with a warning event (`reason`) when it is news;
    /// [`Outcome::Idle`] when it is already there and only a change can help.
    pub fn failed(mut status: S, reason: &str, message: String, retry: Option<Duration>) -> Self {
        let error = status.error_mut();
        let event =
            (error.as_ref() != Some(&message)).then(|| HostEvent::warning(reason, &message));
        if event.is_none() && retry.is_none() {
            return Outcome::Idle;
        }
        *error = Some(message);
        Outcome::Save {
            status,
            event,
            retry,
        }
    }
}

impl<S> Outcome<S> {
    /// `status` saved with `event`; nothing more until a change.
    pub fn saved(status: S, event: HostEvent) -> Self {
        let event = Some(event);
        Outcome::Save {
            status,
            event,
            retry: None,
        }
    }
}

/// Writes what `outcome` says of `object` (`finalizer`: the kind's), and says when
/// to look again.
pub async fn finish<K: Kind, S: ObjectStore>(
    store: &S,
    object: &K,
    finalizer: &str,
    outcome: Outcome<K::Status>,
) -> Result<Next, StoreError> {
    match outcome {
        Outcome::Idle => {}
        Outcome::Finalizer(present) => store.set_finalizer(object, finalizer, present).await?,
        Outcome::Save {
            status,
            event,
            retry,
        } => {
            store.save(object, &status, event.as_slice()).await?;
            return Ok(retry.map_or(Next::OnChange, Next::After));
        }
    }
    Ok(Next::OnChange)
}
