//! Deprovisioning: taking the image off again (`deleted`), with Ironic's automated
//! cleaning or, for `automatedCleaningMode: full`, a full disk wipe after it.
//!
//! Ironic's automated clean steps are the same for every node (`erase_devices_priority`
//! is conductor configuration), so a wipe for one host is a manual clean: undeploy
//! without automated cleaning, then `manage`, clean with the agent's
//! `deploy.erase_devices` (ATA / NVMe secure erase where the disk has it, else
//! `shred`), and `provide`. Each call sees only the node, so where the wipe is, is
//! noted on it (`extra/bmo_full_disk_wipe`): `owed` from the undeploy until the manual
//! clean is seen running, `running` until the node is available again.

use super::{IronicProvisioner, last_error};
use crate::ironic::{
    IronicError, Node, PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::types::{AutomatedCleaningMode, Host, Outcome, Progress, StepKind};

/// The member of the node's `extra` that says where a full wipe is.
const WIPE_MARK: &str = "bmo_full_disk_wipe";

/// Where a full disk wipe of the node is, as noted on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wipe {
    /// The image is (being) taken off; the wipe has not started.
    Owed,
    /// The wipe's manual cleaning was seen running (or is over).
    Running,
}

impl Wipe {
    fn of(node: &Node) -> Option<Self> {
        match node.extra.get(WIPE_MARK).and_then(|v| v.as_str()) {
            Some("owed") => Some(Self::Owed),
            Some("running") => Some(Self::Running),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Owed => "owed",
            Self::Running => "running",
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
    /// The wipe's manual cleaning runs: note so, then wait.
    NoteWipeRunning,
    /// Cleaning failed and the user asked to retry: out of `clean failed` (the wipe,
    /// if one ran, is owed again).
    Recover {
        wipe_again: bool,
    },
    /// Cleaning failed.
    CleaningFailed,
    /// `manage`, to run the wipe from `manageable`.
    Manage,
    /// Manual cleaning with `deploy.erase_devices`.
    StartWipe,
    Provide,
    /// The wipe is over and the node available: remove the note.
    ForgetWipe,
    Done,
    Failed,
    Unexpected,
}

/// Deprovisioning as a function of the node's state, its wipe note, the host's
/// cleaning mode and whether the user asked to retry a failure.
fn next(
    state: ProvisionState,
    wipe: Option<Wipe>,
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
        ProvisionState::Cleaning | ProvisionState::CleanWait if wipe == Some(Wipe::Owed) => {
            Next::NoteWipeRunning
        }
        // Deleting leads into cleaning: wait for both alike.
        ProvisionState::Deleting
        | ProvisionState::Deploying
        | ProvisionState::Cleaning
        | ProvisionState::CleanWait => Next::Follow,
        ProvisionState::CleanFailed if restart_on_failure => Next::Recover {
            wipe_again: wipe == Some(Wipe::Running),
        },
        ProvisionState::CleanFailed => Next::CleaningFailed,
        ProvisionState::Manageable if wipe == Some(Wipe::Owed) => Next::StartWipe,
        ProvisionState::Manageable => Next::Provide,
        ProvisionState::Available => match wipe {
            Some(Wipe::Owed) => Next::Manage,
            Some(Wipe::Running) => Next::ForgetWipe,
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

impl IronicProvisioner {
    pub(super) async fn deprovision_node(&self, host: &Host) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        let wipe = Wipe::of(&node);
        match next(
            node.state(),
            wipe,
            host.cleaning_mode,
            host.restart_on_failure,
        ) {
            Next::Undeploy { retry, wipe } => self.undeploy(host, &node, retry, wipe).await,
            Next::Follow => self.follow_cleaning(host, &node, "Cleaning failed").await,
            Next::NoteWipeRunning => {
                if let Err(e) = self.note_wipe(host, &node, Some(Wipe::Running)).await {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.follow_cleaning(host, &node, "Cleaning failed").await
            }
            Next::Recover { wipe_again } => {
                if wipe_again && let Err(e) = self.note_wipe(host, &node, Some(Wipe::Owed)).await {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.recover_failed_cleaning(host, &node).await
            }
            Next::CleaningFailed => {
                let what = if wipe.is_some() {
                    "Full disk wipe failed"
                } else {
                    "Cleaning failed"
                };
                self.follow_cleaning(host, &node, what).await
            }
            Next::Manage => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    Progress::default(),
                    "return the host to manageable for the full disk wipe",
                )
                .await
            }
            Next::StartWipe => {
                let mut req = Req::new(ProvisionTarget::Clean);
                req.clean_steps = Some(vec![
                    serde_json::json!({"interface": "deploy", "step": "erase_devices"}),
                ]);
                self.transition(
                    host,
                    &node,
                    req,
                    Progress::running(StepKind::Clean, Some("deploy.erase_devices".into())),
                    "start the full disk wipe (manual cleaning: deploy.erase_devices)",
                )
                .await
            }
            Next::Provide => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Provide),
                    Progress::default(),
                    "make the host available (provide)",
                )
                .await
            }
            Next::ForgetWipe => match self.note_wipe(host, &node, None).await {
                Ok(()) => {
                    tracing::info!(host = %host.id, node = %node.uuid, "full disk wipe done");
                    Ok(Outcome::done(Progress::default()))
                }
                Err(e) => self.busy_or_err(host, e, Progress::default()),
            },
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
                Wipe::Owed.name(),
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
        self.transition(
            host,
            node,
            Req::new(ProvisionTarget::Deleted),
            progress,
            what,
        )
        .await
    }

    /// Sets (or with `None` removes) the node's wipe note.
    async fn note_wipe(
        &self,
        host: &Host,
        node: &Node,
        wipe: Option<Wipe>,
    ) -> Result<(), IronicError> {
        let path = format!("/extra/{WIPE_MARK}");
        let op = match wipe {
            Some(w) => PatchOp::set(path, w.name()),
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
                        next(state, None, mode, restart),
                        before_full_mode(state, restart),
                        "{mode:?} in {state:?} (restart {restart})"
                    );
                }
            }
        }
    }

    /// Walks the states Ironic goes through; each step names what bmo does there.
    #[test]
    fn full_mode_undeploys_then_wipes_with_a_manual_clean_then_provides() {
        let walk = [
            (
                S::Active,
                None,
                Next::Undeploy {
                    retry: false,
                    wipe: true,
                },
            ),
            (S::Deleting, Some(Wipe::Owed), Next::Follow),
            (S::Available, Some(Wipe::Owed), Next::Manage),
            (S::Manageable, Some(Wipe::Owed), Next::StartWipe),
            (S::CleanWait, Some(Wipe::Owed), Next::NoteWipeRunning),
            (S::CleanWait, Some(Wipe::Running), Next::Follow),
            (S::Cleaning, Some(Wipe::Running), Next::Follow),
            (S::Manageable, Some(Wipe::Running), Next::Provide),
            (S::Available, Some(Wipe::Running), Next::ForgetWipe),
            (S::Available, None, Next::Done),
        ];
        for (state, wipe, expected) in walk {
            assert_eq!(
                next(state, wipe, Full, false),
                expected,
                "{state:?} with the wipe {wipe:?}"
            );
        }
    }

    #[test]
    fn a_failed_wipe_is_retried_from_the_start_not_skipped() {
        assert_eq!(
            next(S::CleanFailed, Some(Wipe::Running), Full, true),
            Next::Recover { wipe_again: true }
        );
        // After recovery (`manage`), the wipe is owed again: it runs once more.
        assert_eq!(
            next(S::Manageable, Some(Wipe::Owed), Full, true),
            Next::StartWipe
        );
        assert_eq!(
            next(S::CleanFailed, Some(Wipe::Running), Full, false),
            Next::CleaningFailed
        );
    }

    #[test]
    fn a_started_wipe_finishes_even_if_the_mode_changes_meanwhile() {
        for mode in [Metadata, Disabled] {
            assert_eq!(
                next(S::Available, Some(Wipe::Owed), mode, false),
                Next::Manage
            );
            assert_eq!(
                next(S::Manageable, Some(Wipe::Owed), mode, false),
                Next::StartWipe
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
        node.extra.insert(WIPE_MARK.into(), "running".into());
        assert_eq!(Wipe::of(&node), Some(Wipe::Running));
        node.extra.insert(WIPE_MARK.into(), "something else".into());
        assert_eq!(Wipe::of(&node), None);
        node.extra.clear();
        assert_eq!(Wipe::of(&node), None);
    }
}
