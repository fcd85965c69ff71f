//! Hosts at rest: no status write, and the unreachable condition dropped once the
//! provisioner answers.

use super::*;

#[tokio::test]
async fn a_settled_host_writes_no_status() {
    let ctx = site("q", json!({}));
    drive(&ctx, "q", settled).await;
    let writes = ctx.store.status_writes();
    for _ in 0..5 {
        assert_eq!(
            step(&ctx, "q").await,
            Next::After(state_machine::STEADY_POLL)
        );
    }
    assert_eq!(
        ctx.store.status_writes(),
        writes,
        "nothing changed, nothing written"
    );
}

#[tokio::test]
async fn a_settled_host_drops_the_unreachable_condition_once_the_provisioner_answers() {
    let ctx = site("u", json!({}));
    drive(&ctx, "u", settled).await;
    let mut h = ctx.store.host(NS, "u").expect("host");
    let status = h.status.as_mut().expect("status");
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    status.conditions = conditions::set_unreachable(
        &status.conditions,
        "cannot reach Ironic at http://ironic:6385/v1/",
        None,
        &now,
    );
    ctx.store.put_host(h);
    let writes = ctx.store.status_writes();

    assert_eq!(
        step(&ctx, "u").await,
        Next::After(state_machine::STEADY_POLL)
    );
    let h = ctx.store.host(NS, "u").expect("host");
    let status = h.status.expect("status");
    assert!(conditions::unreachable(&status).is_none());
    assert_eq!(status.error_count, 0);
    assert_eq!(status.provisioning.state, State::Provisioned);
    assert_eq!(ctx.store.status_writes(), writes + 1);
    // Then nothing more to write.
    step(&ctx, "u").await;
    assert_eq!(ctx.store.status_writes(), writes + 1);
}
