//! Deleting a host: from every state, upstream's and bmo's Secret finalizers,
//! `clusterctl move`.

use super::*;

/// Deleting a host in `state` ends with the host gone and the provisioner's record
/// removed.
async fn deletion_from(state: State, spec: serde_json::Value) {
    let ctx = site("d", spec);
    // In `state` and holding bmo's finalizer (a host without it is simply gone).
    drive(&ctx, "d", |h| {
        h.is_some_and(|h| state_of(h) == state && h.finalizers().iter().any(|f| f == FINALIZER))
    })
    .await;
    ctx.store.delete_host(NS, "d");
    let states = drive(&ctx, "d", |h| h.is_none()).await;
    assert!(
        ctx.provisioner.host("ns~d").is_none(),
        "deleted from {state:?} through {states:?}, but the provisioner still has it"
    );
    let reasons = event_reasons(&ctx);
    assert!(
        reasons.contains(&"Deleted".to_owned()),
        "{state:?}: {reasons:?}"
    );
}

#[tokio::test]
async fn deletion_from_every_state_releases_the_host() {
    // Not from no state: the reconcile that adds the finalizer also writes the first
    // state, and a host without the finalizer is simply gone.
    for state in TO_PROVISIONED.into_iter().filter(|s| *s != State::None) {
        deletion_from(state, json!({})).await;
    }
    deletion_from(
        State::ExternallyProvisioned,
        json!({"externallyProvisioned": true}),
    )
    .await;

    // Deprovisioning: stop half-way through removing the image.
    let ctx = site("d", json!({}));
    drive(&ctx, "d", in_state(State::Provisioned)).await;
    let mut changed = ctx.store.host(NS, "d").expect("host");
    changed.spec.image = None;
    ctx.store.put_host(changed);
    drive(&ctx, "d", in_state(State::Deprovisioning)).await;
    ctx.store.delete_host(NS, "d");
    drive(&ctx, "d", |h| h.is_none()).await;
    assert!(ctx.provisioner.host("ns~d").is_none());
}

/// The stored Secret `name`'s finalizers.
fn secret_finalizers(ctx: &TestContext, name: &str) -> Vec<String> {
    ctx.store
        .stored::<Secret>(NS, name)
        .map(|s| s.finalizers().to_vec())
        .unwrap_or_default()
}

#[tokio::test]
async fn upstreams_secret_finalizer_goes_when_the_host_no_longer_needs_the_secret() {
    let ctx = context();
    let network = network_data_secret("h-net", r#"{"links": []}"#);
    for secret in [bmc_secret("h-bmc"), bmc_secret("h-bmc-new"), network] {
        let mut secret = secret;
        secret.metadata.finalizers = Some(vec![SECRET_FINALIZER.into(), "other/keep".into()]);
        ctx.store.put(secret);
    }
    ctx.store.put_host(host(
        "h",
        json!({"preprovisioningNetworkDataName": "h-net", "image": null}),
    ));
    drive(&ctx, "h", in_state(State::Available)).await;
    // In use: upstream's finalizer stays, as under upstream.
    assert!(secret_finalizers(&ctx, "h-bmc").contains(&SECRET_FINALIZER.to_owned()));

    // Another Secret: the one last tried is released.
    let mut moved = ctx.store.host(NS, "h").expect("host");
    if let Some(bmc) = moved.spec.bmc.as_mut() {
        bmc.credentials_name = "h-bmc-new".into();
    }
    ctx.store.put_host(moved);
    step(&ctx, "h").await;
    assert_eq!(secret_finalizers(&ctx, "h-bmc"), ["other/keep"]);
    assert!(secret_finalizers(&ctx, "h-bmc-new").contains(&SECRET_FINALIZER.to_owned()));

    // Deleted: the BMC and network data Secrets are released; other finalizers stay.
    ctx.store.delete_host(NS, "h");
    drive(&ctx, "h", |h| h.is_none()).await;
    assert_eq!(secret_finalizers(&ctx, "h-bmc-new"), ["other/keep"]);
    assert_eq!(secret_finalizers(&ctx, "h-net"), ["other/keep"]);
}

#[tokio::test]
async fn the_bmc_secret_is_held_while_its_host_uses_it_and_released_with_the_host() {
    let ctx = context();
    ctx.store.put(bmc_secret("f-bmc"));
    ctx.store.put_host(host("f", json!({"image": null})));
    drive(&ctx, "f", in_state(State::Available)).await;
    // As upstream: a Secret in use cannot be deleted from under its host.
    assert_eq!(secret_finalizers(&ctx, "f-bmc"), [SECRET_FINALIZER]);

    ctx.store.delete_host(NS, "f");
    drive(&ctx, "f", |h| h.is_none()).await;
    assert!(secret_finalizers(&ctx, "f-bmc").is_empty());
}

#[tokio::test]
async fn a_host_deleted_by_clusterctl_move_lets_go_and_leaves_the_node_deployed() {
    let ctx = site("mv", json!({}));
    drive(&ctx, "mv", settled).await;
    let before = ctx.provisioner.host("ns~mv").expect("registered");
    // clusterctl replaces every annotation with its own, then deletes.
    let mut h = ctx.store.host(NS, "mv").expect("host");
    h.metadata.annotations = Some(BTreeMap::from([(
        crate::api::host::DELETE_FOR_MOVE_ANNOTATION.to_owned(),
        String::new(),
    )]));
    ctx.store.put_host(h);
    ctx.store.delete_host(NS, "mv");
    let writes = ctx.store.status_writes();
    assert_eq!(step(&ctx, "mv").await, Next::OnChange);
    assert!(ctx.store.host(NS, "mv").is_none(), "the finalizer stayed");
    assert_eq!(ctx.store.status_writes(), writes, "the status was written");
    assert_eq!(
        ctx.provisioner.host("ns~mv"),
        Some(before),
        "the provisioner's record changed"
    );
    assert_eq!(secret_finalizers(&ctx, "mv-bmc"), Vec::<String>::new());
    assert!(event_reasons(&ctx).contains(&"DeletedForMove".to_owned()));
}

#[tokio::test]
async fn deleting_an_unmanaged_host_needs_no_provisioner() {
    let ctx = unmanaged_site("u");
    drive(&ctx, "u", in_state(State::Unmanaged)).await;
    ctx.store.delete_host(NS, "u");
    let states = drive(&ctx, "u", |h| h.is_none()).await;
    assert_eq!(states.first(), Some(&State::Unmanaged));
}
