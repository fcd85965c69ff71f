//! Power on and off.

use reqwest::StatusCode;

use super::{IronicProvisioner, sentence};
use crate::ironic::{
    IronicError, Node, PowerTarget, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::types::{Host, Outcome, PowerMode, PowerState, SOFT_POWER_OFF_TIMEOUT};

impl IronicProvisioner {
    pub(super) async fn power_on_node(&self, host: &Host) -> ProvisionerResult<PowerState> {
        let node = self.require_node(host).await?;
        let now = Self::power_of(&node);
        if node.target_power_state.is_some() || node.target_provision_state.is_some() {
            return self.wait_short(now);
        }
        if now == PowerState::On {
            return Ok(Outcome::done(now));
        }
        if let Some(error) = node
            .last_error
            .as_deref()
            .filter(|e| e.contains("power on"))
            && !host.restart_on_failure
        {
            return Ok(Outcome::failed(
                now,
                format!("Powering on failed: {}", sentence(error)),
            ));
        }
        match self.power(&node, PowerTarget::On, None).await {
            Ok(()) => self.changed(now),
            Err(e) => self.refused_or_err(host, e, now, "Ironic refused to power the host on"),
        }
    }

    pub(super) async fn power_off_node(
        &self,
        host: &Host,
        mode: PowerMode,
    ) -> ProvisionerResult<PowerState> {
        let Some(node) = self.own_node(host, "power off").await? else {
            return Ok(Outcome::done(PowerState::Unknown));
        };
        let now = Self::power_of(&node);
        if host.disable_power_off {
            return Ok(Outcome::failed(
                now,
                "the host has disablePowerOff set; reboot it instead of powering it off",
            ));
        }
        if node.target_power_state.is_some() || node.target_provision_state.is_some() {
            return self.wait_short(now);
        }
        if now == PowerState::Off {
            return Ok(Outcome::done(now));
        }
        if node.state() == ProvisionState::InspectWait {
            return self
                .transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Abort),
                    now,
                    "abort inspection before powering off",
                )
                .await;
        }
        // A soft power off that already failed (e.g. the OS ignored ACPI until the
        // timeout) is followed by a hard one.
        let soft_failed = node
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("soft power off"));
        let soft = mode == PowerMode::Soft && !soft_failed;
        let result = if soft {
            match self
                .power(
                    &node,
                    PowerTarget::SoftOff,
                    Some(SOFT_POWER_OFF_TIMEOUT.as_secs() as u32),
                )
                .await
            {
                Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                    tracing::info!(host = %host.id, "soft power off not supported ({e}); powering off hard");
                    self.power(&node, PowerTarget::Off, None).await
                }
                other => other,
            }
        } else {
            self.power(&node, PowerTarget::Off, None).await
        };
        match result {
            Ok(()) => self.changed(now),
            Err(e) => self.refused_or_err(host, e, now, "Ironic refused to power the host off"),
        }
    }

    async fn power(
        &self,
        node: &Node,
        target: PowerTarget,
        timeout: Option<u32>,
    ) -> Result<(), IronicError> {
        self.client
            .set_power_state(&node.uuid, target, timeout)
            .await
    }
}
