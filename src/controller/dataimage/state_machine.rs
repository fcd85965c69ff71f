//! What to do about a DataImage, as pure functions: no I/O, no clock.
//!
//! Two callers decide here. The DataImage controller ([`next`]) keeps the object's
//! bookkeeping: the host as owner, [`DATA_IMAGE_FINALIZER`], and on deletion the
//! image ejected before the finalizer goes. The host controller asks
//! [`before_power_on`] when it is about to power on a provisioned or externally
//! provisioned host (where upstream attaches): the image named by `spec.url` is
//! inserted (or changed, or ejected for a deleted DataImage) before the host boots.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
use crate::api::images::{AttachedImageReference, DATA_IMAGE_FINALIZER, DataImageError};
use crate::api::{BareMetalHost, DataImage, DataImageStatus};
use crate::controller::runtime::store;
use crate::provisioner::VirtualCd;

/// How soon to look again while Ironic attaches or ejects in the background.
pub const BUSY_POLL: Duration = Duration::from_secs(2);
/// How soon to look again after the virtual media could not be read (upstream's
/// delay).
pub const READ_RETRY: Duration = Duration::from_secs(30);
/// The shortest wait after a failed attach or detach (upstream's delay).
pub const MIN_ERROR_BACKOFF: Duration = Duration::from_secs(30);
/// Event reason of a failed attach, detach or read.
pub const ERROR_REASON: &str = "DataImageError";

/// What reading the host's virtual CD gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CdRead {
    /// The provisioner has no node for the host (not registered, or deleted).
    NoNode,
    /// The read failed (Ironic unreachable, an API too old, the BMC not answering).
    Failed(String),
    Read(VirtualCd),
}

/// What the DataImage controller found so far.
#[derive(Debug, Clone)]
pub struct Facts {
    pub image: DataImage,
    /// The BareMetalHost of the same name, when there is one.
    pub host: Option<BareMetalHost>,
    /// The host's virtual CD, once read in this reconcile.
    pub cd: Option<CdRead>,
}

/// When to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// When something watched changes.
    OnChange,
    After(Duration),
    /// After the error backoff for `status.error.count`.
    Backoff,
}

/// The DataImage controller's next step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    AddOwner,
    SetFinalizer(bool),
    /// Read the host's virtual CD, then ask again.
    ReadCd,
    /// Start ejecting, saving `status` first with a Warning event when the last try
    /// failed (the next try waits for the backoff).
    Detach {
        status: Option<(DataImageStatus, String)>,
    },
    Save {
        status: DataImageStatus,
        event: Option<String>,
        requeue: Requeue,
    },
    Wait(Requeue),
}

fn has_finalizer(image: &DataImage) -> bool {
    store::has_finalizer(image, DATA_IMAGE_FINALIZER)
}

fn owned_by(image: &DataImage, host: &BareMetalHost) -> bool {
    image
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == host.metadata.uid.as_ref())
}

/// The DataImage controller's step, as upstream's DataImage controller does it, with
/// one difference: a deleted DataImage whose image is still inserted is ejected at
/// once (upstream waits for the host's next power-on), so that deleting it is enough.
pub fn next(facts: &Facts) -> Step {
    let image = &facts.image;
    let deleting = image.metadata.deletion_timestamp.is_some();
    let Some(host) = &facts.host else {
        // Nothing can be attached to a host that does not exist.
        return match has_finalizer(image) {
            true => Step::SetFinalizer(false),
            false => Step::Wait(Requeue::OnChange),
        };
    };
    if host.annotations().contains_key(PAUSED_ANNOTATION) {
        return Step::Wait(Requeue::OnChange);
    }
    if !owned_by(image, host) {
        return Step::AddOwner;
    }
    if !deleting {
        return match has_finalizer(image) {
            true => Step::Wait(Requeue::OnChange),
            false => Step::SetFinalizer(true),
        };
    }
    if !has_finalizer(image) {
        return Step::Wait(Requeue::OnChange);
    }
    // A detached host is not bmo's to touch: the finalizer goes without ejecting.
    if host.annotations().contains_key(DETACHED_ANNOTATION) {
        return Step::SetFinalizer(false);
    }
    let host_name = format!(
        "{}/{}",
        host.namespace().unwrap_or_default(),
        host.name_any()
    );
    let status = image.status.clone().unwrap_or_default();
    match &facts.cd {
        None => Step::ReadCd,
        Some(CdRead::NoNode) => Step::SetFinalizer(false),
        Some(CdRead::Failed(reason)) => {
            let message = read_failure(&host_name, reason);
            Step::Save {
                status: with_error(status, &message),
                event: Some(message),
                requeue: Requeue::After(READ_RETRY),
            }
        }
        Some(CdRead::Read(cd)) if cd.busy => Step::Wait(Requeue::After(BUSY_POLL)),
        Some(CdRead::Read(cd)) if cd.inserted => Step::Detach {
            status: detach_failed(&host_name, cd)
                .map(|message| (with_error(status, &message), message)),
        },
        Some(CdRead::Read(_)) => Step::SetFinalizer(false),
    }
}

/// What the host controller does about its DataImage before powering on.
#[derive(Debug, Clone, PartialEq)]
pub enum PowerOnStep {
    /// Power on now, after saving `status` when it is `Some`.
    Proceed(Option<DataImageStatus>),
    /// Start inserting `spec.url`.
    Attach,
    /// Start ejecting what is inserted; `failed` carries the failure of the last
    /// try (saved as the error, with an event, and retried after the backoff).
    Detach { failed: Option<String> },
    /// Do not power on yet: save `status` (and a Warning event with `event`) and look
    /// again.
    Hold {
        status: Option<DataImageStatus>,
        event: Option<String>,
        requeue: Requeue,
    },
}

/// Upstream's attach and detach rules, for a provisioned or externally provisioned
/// host that should be on and is off. `cd` is the host's virtual CD as read just now.
pub fn before_power_on(host_name: &str, image: &DataImage, cd: &CdRead, now: &Time) -> PowerOnStep {
    let mut status = image.status.clone().unwrap_or_default();
    status.last_reconciled = Some(now.clone());
    let cd = match cd {
        // No node: the host controller registers it first; nothing to attach to.
        CdRead::NoNode => return PowerOnStep::Proceed(None),
        CdRead::Failed(reason) => {
            let message = read_failure(host_name, reason);
            return PowerOnStep::Hold {
                status: Some(with_error(status, &message)),
                event: Some(message),
                requeue: Requeue::Backoff,
            };
        }
        CdRead::Read(cd) => cd,
    };
    if cd.busy {
        return PowerOnStep::Hold {
            status: None,
            event: None,
            requeue: Requeue::After(BUSY_POLL),
        };
    }
    let attached = status
        .attached_image
        .as_ref()
        .map(|a| a.url.clone())
        .filter(|u| !u.is_empty());
    if image.metadata.deletion_timestamp.is_some() {
        // The DataImage controller removes the finalizer once nothing is inserted.
        return match cd.inserted {
            true => PowerOnStep::Detach {
                failed: detach_failed(host_name, cd),
            },
            false => PowerOnStep::Proceed(None),
        };
    }
    // What bmo attached is not inserted: the attach failed, or the media was
    // ejected behind bmo's back. Forget it; attach again unless it failed.
    if attached.is_some() && !cd.inserted {
        status.attached_image = None;
        return match &cd.failure {
            Some(reason) => {
                let message = attach_failure(host_name, &image.spec.url, reason);
                PowerOnStep::Hold {
                    status: Some(with_error(status, &message)),
                    event: Some(message),
                    requeue: Requeue::Backoff,
                }
            }
            None => PowerOnStep::Hold {
                status: Some(status),
                event: None,
                requeue: Requeue::After(Duration::ZERO),
            },
        };
    }
    let requested = Some(image.spec.url.clone()).filter(|u| !u.is_empty());
    if requested != attached {
        if attached.is_some() || (cd.inserted && requested.is_none()) {
            return PowerOnStep::Detach {
                failed: detach_failed(host_name, cd),
            };
        }
        if requested.is_some() {
            return PowerOnStep::Attach;
        }
    }
    proceed(image, status)
}

/// Power on now, saving `status` (without an error) if the error goes or the image
/// was never reconciled.
fn proceed(image: &DataImage, mut status: DataImageStatus) -> PowerOnStep {
    status.error = None;
    let before = image.status.as_ref();
    let changed = before.and_then(|s| s.error.as_ref()).is_some()
        || before.and_then(|s| s.last_reconciled.as_ref()).is_none();
    PowerOnStep::Proceed(changed.then_some(status))
}

/// The status after an attach was started (`refused` is `None`) or refused.
pub fn after_attach(
    host_name: &str,
    image: &DataImage,
    refused: Option<&str>,
    now: &Time,
) -> (DataImageStatus, Option<String>, Requeue) {
    let mut status = image.status.clone().unwrap_or_default();
    status.last_reconciled = Some(now.clone());
    match refused {
        Some(reason) => {
            let message = attach_failure(host_name, &image.spec.url, reason);
            (
                with_error(status, &message),
                Some(message),
                Requeue::Backoff,
            )
        }
        None => {
            // Upstream records the URL as attached once the attach is asked for:
            // Ironic's answer names its own copy of the image, never `spec.url`.
            status.attached_image = Some(AttachedImageReference {
                url: image.spec.url.clone(),
            });
            (status, None, Requeue::After(BUSY_POLL))
        }
    }
}

/// The status after a detach was started (`refused` is `None`) or refused.
pub fn after_detach(
    host_name: &str,
    image: &DataImage,
    refused: Option<&str>,
    now: &Time,
) -> (Option<DataImageStatus>, Option<String>, Requeue) {
    match refused {
        Some(reason) => {
            let mut status = image.status.clone().unwrap_or_default();
            status.last_reconciled = Some(now.clone());
            let message = detach_failure(host_name, reason);
            (
                Some(with_error(status, &message)),
                Some(message),
                Requeue::Backoff,
            )
        }
        None => (None, None, Requeue::After(BUSY_POLL)),
    }
}

/// `image`'s status with `message` as a new error, as of `now`.
pub fn failed(image: &DataImage, message: &str, now: &Time) -> DataImageStatus {
    let mut status = image.status.clone().unwrap_or_default();
    status.last_reconciled = Some(now.clone());
    with_error(status, message)
}

/// The failure of the last detach, when the image is still inserted after one.
fn detach_failed(host_name: &str, cd: &VirtualCd) -> Option<String> {
    cd.failure
        .as_deref()
        .filter(|reason| reason.starts_with("Could not detach"))
        .map(|reason| detach_failure(host_name, reason))
}

fn with_error(mut status: DataImageStatus, message: &str) -> DataImageStatus {
    let count = status.error.as_ref().map_or(0, |e| e.count) + 1;
    status.error = Some(DataImageError {
        count,
        message: message.to_owned(),
    });
    status
}

/// `url` as messages show it: without a password it may carry.
fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => crate::ironic::without_credentials(&parsed),
        Err(_) => "spec.url".to_owned(),
    }
}

/// `reason` without the password `url` may carry (Ironic's messages quote the URL).
fn redacted(reason: &str, url: &str) -> String {
    match url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_owned))
    {
        Some(password) if !password.is_empty() => reason.replace(&password, "***"),
        _ => reason.to_owned(),
    }
}

fn attach_failure(host_name: &str, url: &str, reason: &str) -> String {
    format!(
        "host {host_name}: attaching spec.url {} as virtual media failed: {}; make spec.url an http(s) URL of the ISO that Ironic's conductor can download, and the host tries again at its next power-on",
        shown_url(url),
        redacted(reason, url)
    )
}

fn detach_failure(host_name: &str, reason: &str) -> String {
    format!(
        "host {host_name}: ejecting the DataImage's virtual media failed: {reason}; bmo tries again (check the BMC's virtual media, or add the detached annotation to the host to let the DataImage go without ejecting)"
    )
}

fn read_failure(host_name: &str, reason: &str) -> String {
    format!(
        "host {host_name}: reading the host's virtual media for the DataImage failed: {reason}; bmo tries again (check Ironic and the BMC)"
    )
}

#[cfg(test)]
mod tests;
