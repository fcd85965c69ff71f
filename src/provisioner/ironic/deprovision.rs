//! Deprovisioning: taking the image off again (`deleted`), with Ironic's automated
//! cleaning or, for `automatedCleaningMode: full`, a full disk wipe after it.
//!
//! Ironic's automated clean steps are the same for every node (`erase_devices_priority`
//! is conductor configuration), so a wipe for one host is a manual clean: undeploy
//! without automated cleaning, then `manage`, clean with the agent's
//! `deploy.erase_devices` (ATA / NVMe secure erase where the disk has it, else
//! `shred`), and `provide`. Each call sees only the node, so where the wipe is, is
//! noted on it (`extra/bmo_full_disk_wipe`): `owed` from the undeploy on, then, just
//! before the manual clean is asked for, `started <provision_updated_at>` (Ironic
//! refuses node updates while cleaning). Back in `manageable` with a different
//! `provision_updated_at`, the clean ran and succeeded (a failed one stops in
//! `clean failed`, where the wipe is owed again); the note goes once the node is
//! available.

use super::{IronicProvisioner, conductor_died, last_error};
use crate::ironic::{
    IronicError, Node, PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::types::{AutomatedCleaningMode, Host, Outcome, Progress, StepKind};

/// The member of the node's `extra` that says where a full wipe is.
const WIPE_MARK: &str = "bmo_full_disk_wipe";

/// Where a full disk wipe of the node is, as noted on it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wipe {
    /// The image is (being) taken off; the wipe has not started.
    Owed,
    /// The wipe's manual cleaning was asked for while the node's
    /// `provision_updated_at` was this.
    Started(String),
}

impl Wipe {
    fn of(node: &Node) -> Option<Self> {
        let note = node.extra.get(WIPE_MARK)?.as_str()?;
        if note == "owed" {
            return Some(Self::Owed);
        }
        note.strip_prefix("started ")
            .map(|since| Self::Started(since.to_owned()))
    }

    fn note(&self) -> String {
        match self {
            Self::Owed => "owed".to_owned(),
            Self::Started(since) => format!("started {since}"),
        }
    }
}

/// The next thing deprovisioning does to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// `deleted`, with the node's `automated_clean` set first unless `retry`; `wipe`
    /// turns automated cleaning off and notes the wipe as owed.
    Undeploy {
        retry: bool,
        wipe: bool,
    },
    /// Ironic is working (deleting, cleaning): wait.
    Follow,
    /// Cleaning failed and the user asked to retry: out of `clean failed` (the wipe,
    /// if one ran, is owed again).
    Recover {
        wipe_again: bool,
    },
    /// Cleaning failed.
    CleaningFailed,
    /// `manage`, to run the wipe from `manageable`.
    Manage,
    /// Manual cleaning with `deploy.erase_devices`, noted as started first unless
    /// `noted` (an earlier request did not take effect).
    StartWipe {
        noted: bool,
    },
    Provide,
    /// The wipe is over and the node available: remove the note.
    ForgetWipe,
    Done,
    Failed,
    Unexpected,
}

/// Deprovisioning as a function of the node's state and `provision_updated_at`, its
/// wipe note, the host's cleaning mode and whether the user asked to retry a failure.
fn next(
    state: ProvisionState,
    provision_updated_at: &str,
    wipe: Option<&Wipe>,
    mode: AutomatedCleaningMode,
    restart_on_failure: bool,
) -> Next {
    let full = mode == AutomatedCleaningMode::Full;
    match state {
        ProvisionState::Active | ProvisionState::DeployFailed | ProvisionState::WaitCallBack => {
            Next::Undeploy {
                retry: false,
                wipe: full,
            }
        }
        // Deleting leads into cleaning: wait for both alike.
        ProvisionState::Deleting
        | ProvisionState::Deploying
        | ProvisionState::Cleaning
        | ProvisionState::CleanWait => Next::Follow,
        ProvisionState::CleanFailed if restart_on_failure => Next::Recover {
            wipe_again: matches!(wipe, Some(Wipe::Started(_))),
        },
        ProvisionState::CleanFailed => Next::CleaningFailed,
        ProvisionState::Manageable => match wipe {
            Some(Wipe::Owed) => Next::StartWipe { noted: false },
            // Still the `manageable` the clean was asked from: it never started.
            Some(Wipe::Started(since)) if since == provision_updated_at => {
                Next::StartWipe { noted: true }
            }
            Some(Wipe::Started(_)) | None => Next::Provide,
        },
        ProvisionState::Available => match wipe {
            Some(Wipe::Owed) => Next::Manage,
            Some(Wipe::Started(_)) => Next::ForgetWipe,
            None => Next::Done,
        },
        ProvisionState::Error if restart_on_failure => Next::Undeploy {
            retry: true,
            wipe: full,
        },
        ProvisionState::Error => Next::Failed,
        _ => Next::Unexpected,
    }
}

/// A full wipe is noted on the node: its automated cleaning stays off until the
/// wipe is over (the wipe erases more, and `provide` after it would clean again).
pub(super) fn wipe_noted(node: &Node) -> bool {
    node.extra.contains_key(WIPE_MARK)
}

impl IronicProvisioner {
    pub(super) async fn deprovision_node(&self, host: &Host) -> ProvisionerResult<Progress> {
        // No node of its own (gone, or only another host's): nothing on the machine
        // is this host's to take off, and a deletion must not wait for it.
        let Some(node) = self.own_node(host, "deprovision").await? else {
            return Ok(Outcome::done(Progress::default()));
        };
        let wipe = Wipe::of(&node);
        let updated_at = node.provision_updated_at.clone().unwrap_or_default();
        match next(
            node.state(),
            &updated_at,
            wipe.as_ref(),
            host.cleaning_mode,
            // A step Ironic failed only because its conductor died runs again as if asked to.
            host.restart_on_failure || conductor_died(&node),
        ) {
            Next::Undeploy { retry, wipe } => self.undeploy(host, &node, retry, wipe).await,
            Next::Follow => self.follow_cleaning(host, &node, "Cleaning failed").await,
            Next::Recover { wipe_again } => self.recover(host, &node, wipe_again).await,
            Next::CleaningFailed => {
                let what = if wipe.is_some() {
                    "Full disk wipe failed"
                } else {
                    "Cleaning failed"
                };
                self.follow_cleaning(host, &node, what).await
            }
            Next::Manage => {
                self.transition_to(
                    host,
                    &node,
                    ProvisionTarget::Manage,
                    Progress::default(),
                    "return the host to manageable for the full disk wipe",
                )
                .await
            }
            Next::StartWipe { noted } => self.start_wipe(host, &node, updated_at, noted).await,
            Next::Provide => {
                self.transition_to(
                    host,
                    &node,
                    ProvisionTarget::Provide,
                    Progress::default(),
                    "make the host available (provide)",
                )
                .await
            }
            Next::ForgetWipe => self.forget_wipe(host, &node).await,
            Next::Done => Ok(Outcome::done(Progress::default())),
            Next::Failed => Ok(Outcome::failed(
                Progress::default(),
                format!("Deprovisioning failed: {}", last_error(&node)),
            )),
            Next::Unexpected => {
                Self::unexpected(&node, Progress::default(), "deprovision the host")
            }
        }
    }

    /// Recovers from failed cleaning, noting a wipe as owed again first if it must run
    /// again.
    async fn recover(
        &self,
        host: &Host,
        node: &Node,
        wipe_again: bool,
    ) -> ProvisionerResult<Progress> {
        if wipe_again && let Err(e) = self.note_wipe(host, node, Some(&Wipe::Owed)).await {
            return self.busy_or_err(host, e, Progress::default());
        }
        self.recover_failed_cleaning(host, node).await
    }

    /// Starts the full disk wipe (manual cleaning), noting it as started (by the
    /// node's `provision_updated_at`) unless it is already.
    async fn start_wipe(
        &self,
        host: &Host,
        node: &Node,
        updated_at: String,
        noted: bool,
    ) -> ProvisionerResult<Progress> {
        let started = Wipe::Started(updated_at);
        if !noted && let Err(e) = self.note_wipe(host, node, Some(&started)).await {
            return self.busy_or_err(host, e, Progress::default());
        }
        let mut req = Req::new(ProvisionTarget::Clean);
        req.clean_steps = Some(vec![
            serde_json::json!({"interface": "deploy", "step": "erase_devices"}),
        ]);
        self.transition(
            host,
            node,
            req,
            Progress::running(StepKind::Clean, Some("deploy.erase_devices".into())),
            "start the full disk wipe (manual cleaning: deploy.erase_devices)",
        )
        .await
    }

    /// The wipe is over: forgets the note, and deprovisioning is done.
    async fn forget_wipe(&self, host: &Host, node: &Node) -> ProvisionerResult<Progress> {
        match self.note_wipe(host, node, None).await {
            Ok(()) => {
                tracing::info!(host = %host.id, node = %node.uuid, "full disk wipe done");
                Ok(Outcome::done(Progress::default()))
            }
            Err(e) => self.busy_or_err(host, e, Progress::default()),
        }
    }

    /// `deleted`. A wipe turns the node's automated cleaning off (the wipe erases more)
    /// and notes the wipe as owed in the same update; otherwise `automated_clean`
    /// follows the host's cleaning mode, except on a retry after an error.
    async fn undeploy(
        &self,
        host: &Host,
        node: &Node,
        retry: bool,
        wipe: bool,
    ) -> ProvisionerResult<Progress> {
        let prepared = if wipe {
            let mut ops = vec![PatchOp::set(
                format!("/extra/{WIPE_MARK}"),
                Wipe::Owed.note(),
            )];
            if node.automated_clean != Some(false) {
                ops.push(PatchOp::set("/automated_clean", false));
            }
            self.patch(host, node, &ops).await.map(drop)
        } else if retry {
            Ok(())
        } else {
            self.sync_automated_clean(host, node).await
        };
        if let Err(e) = prepared {
            return self.busy_or_err(host, e, Progress::default());
        }
        let what = match (retry, wipe) {
            (false, false) => "start deprovisioning",
            (false, true) => "start deprovisioning (full disk wipe to follow)",
            (true, _) => "retry deprovisioning",
        };
        let progress = if retry {
            Progress::default()
        } else {
            Progress::started()
        };
        self.transition_to(host, node, ProvisionTarget::Deleted, progress, what)
            .await
    }

    /// Sets (or with `None` removes) the node's wipe note.
    async fn note_wipe(
        &self,
        host: &Host,
        node: &Node,
        wipe: Option<&Wipe>,
    ) -> Result<(), IronicError> {
        let path = format!("/extra/{WIPE_MARK}");
        let op = match wipe {
            Some(w) => PatchOp::set(path, w.note()),
            None => PatchOp::remove(path),
        };
        self.patch(host, node, &[op]).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AutomatedCleaningMode::{Disabled, Full, Metadata};
    use ProvisionState as S;

    const T0: &str = "2026-12-04T13:00:00.000000+00:00";
    const T1: &str = "2026-12-04T13:05:00.000000+00:00";

    /// What deprovisioning did before the full mode existed, for a node without a
    /// wipe note.
    fn before_full_mode(state: ProvisionState, restart: bool) -> Next {
        match state {
            S::Active | S::DeployFailed | S::WaitCallBack => Next::Undeploy {
                retry: false,
                wipe: false,
            },
            S::Deleting | S::Deploying | S::Cleaning | S::CleanWait => Next::Follow,
            S::CleanFailed if restart => Next::Recover { wipe_again: false },
            S::CleanFailed => Next::CleaningFailed,
            S::Manageable => Next::Provide,
            S::Available => Next::Done,
            S::Error if restart => Next::Undeploy {
                retry: true,
                wipe: false,
            },
            S::Error => Next::Failed,
            _ => Next::Unexpected,
        }
    }

    const STATES: [ProvisionState; 16] = [
        S::Enroll,
        S::Manageable,
        S::Available,
        S::Active,
        S::Deploying,
        S::WaitCallBack,
        S::DeployFailed,
        S::Cleaning,
        S::CleanWait,
        S::CleanFailed,
        S::Inspecting,
        S::Deleting,
        S::Error,
        S::Adopting,
        S::Servicing,
        S::Other,
    ];

    #[test]
    fn metadata_and_disabled_deprovision_as_before() {
        for mode in [Metadata, Disabled] {
            for state in STATES {
                for restart in [false, true] {
                    assert_eq!(
                        next(state, T0, None, mode, restart),
                        before_full_mode(state, restart),
                        "{mode:?} in {state:?} (restart {restart})"
                    );
                }
            }
        }
    }

    /// In `mode` (and with `restart` on failure), each (state, time of its last change,
    /// wipe note) leads to the [`Next`] paired with it.
    fn assert_next(
        mode: AutomatedCleaningMode,
        restart: bool,
        cases: &[(ProvisionState, &str, Option<&Wipe>, Next)],
    ) {
        for &(state, at, wipe, expected) in cases {
            assert_eq!(
                next(state, at, wipe, mode, restart),
                expected,
                "{state:?} at {at} with the wipe {wipe:?} in {mode:?}"
            );
        }
    }

    /// Walks the states Ironic goes through; each step names what bmo does there.
    #[test]
    fn full_mode_undeploys_then_wipes_with_a_manual_clean_then_provides() {
        let owed = Wipe::Owed;
        let started = Wipe::Started(T0.into());
        let walk = [
            (
                S::Active,
                T0,
                None,
                Next::Undeploy {
                    retry: false,
                    wipe: true,
                },
            ),
            (S::Deleting, T0, Some(&owed), Next::Follow),
            (S::Available, T0, Some(&owed), Next::Manage),
            (
                S::Manageable,
                T0,
                Some(&owed),
                Next::StartWipe { noted: false },
            ),
            (S::CleanWait, T0, Some(&started), Next::Follow),
            (S::Cleaning, T0, Some(&started), Next::Follow),
            // Back in manageable since the clean was asked for: it ran.
            (S::Manageable, T1, Some(&started), Next::Provide),
            (S::Available, T1, Some(&started), Next::ForgetWipe),
            (S::Available, T1, None, Next::Done),
        ];
        assert_next(Full, false, &walk);
    }

    #[test]
    fn a_clean_request_that_did_not_take_effect_is_made_again() {
        let started = Wipe::Started(T0.into());
        assert_eq!(
            next(S::Manageable, T0, Some(&started), Full, false),
            Next::StartWipe { noted: true }
        );
    }

    #[test]
    fn a_failed_wipe_is_retried_from_the_start_not_skipped() {
        let started = Wipe::Started(T0.into());
        assert_next(
            Full,
            true,
            &[
                (
                    S::CleanFailed,
                    T1,
                    Some(&started),
                    Next::Recover { wipe_again: true },
                ),
                // After recovery (`manage`), the wipe is owed again: it runs once more.
                (
                    S::Manageable,
                    T1,
                    Some(&Wipe::Owed),
                    Next::StartWipe { noted: false },
                ),
            ],
        );
        assert_next(
            Full,
            false,
            &[(S::CleanFailed, T1, Some(&started), Next::CleaningFailed)],
        );
    }

    #[test]
    fn a_started_wipe_finishes_even_if_the_mode_changes_meanwhile() {
        for mode in [Metadata, Disabled] {
            assert_next(
                mode,
                false,
                &[
                    (S::Available, T0, Some(&Wipe::Owed), Next::Manage),
                    (
                        S::Manageable,
                        T0,
                        Some(&Wipe::Owed),
                        Next::StartWipe { noted: false },
                    ),
                ],
            );
        }
    }

    #[test]
    fn the_note_is_read_from_the_nodes_extra() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "uuid": "u", "driver": "redfish",
            "extra": {WIPE_MARK: "owed"}
        }))
        .unwrap();
        assert_eq!(Wipe::of(&node), Some(Wipe::Owed));
        let started = Wipe::Started(T0.into());
        node.extra.insert(WIPE_MARK.into(), started.note().into());
        assert_eq!(Wipe::of(&node), Some(started));
        node.extra.insert(WIPE_MARK.into(), "something else".into());
        assert_eq!(Wipe::of(&node), None);
        node.extra.clear();
        assert_eq!(Wipe::of(&node), None);
    }
}
