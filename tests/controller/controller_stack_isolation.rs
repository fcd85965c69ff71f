//! Two stacks on one machine do not change each other's systems (issue 37, point 5).
//!
//! Every stack names its emulated Redfish systems alike (`bmo-test-N`, the same
//! UUIDs). sushy-tools' fake driver keeps their power state in sqlite files under
//! `SUSHY_EMULATOR_STATE_DIR`, by default the system temp dir: two emulators started
//! by tests/env/stack shared it, and one stack's power actions showed in the other's.
//! Each emulator now keeps its state in its own directory. Two emulators configured as
//! a stack configures its own (`tests/env/stack private-sushy`) stand for two stacks
//! here: the stack's own emulator is used by the tests running beside this one.

use std::time::Duration;

use crate::support::{PrivateSushy, eventually};

#[tokio::test]
async fn a_system_powered_on_in_one_stack_stays_off_in_another() {
    let _shared = crate::support::shared();
    let a = PrivateSushy::start("isolation-a", 2);
    let b = PrivateSushy::start("isolation-b", 2);
    assert_eq!(a.system_ids, b.system_ids, "the same systems in both");
    let id = a.system_ids[1].clone();
    assert_eq!(a.power(&id).await, "Off");
    assert_eq!(b.power(&id).await, "Off");

    a.reset(&id, "On").await;
    // The fake driver applies a power change after a random delay of up to 11 s.
    eventually("the system on in A", Duration::from_secs(30), || async {
        match a.power(&id).await.as_str() {
            "On" => Ok(()),
            other => Err(other.to_owned()),
        }
    })
    .await;
    assert_eq!(b.power(&id).await, "Off", "A's power action showed in B");
    assert_eq!(b.power(&b.system_ids[0]).await, "Off");
}
