//! A host's way through the lifecycle through the reconciler: every state to
//! provisioned and back, unmanaged, externally provisioned, paused; the running
//! clean step in the status.

use super::*;

#[tokio::test]
async fn a_host_goes_through_every_state_to_provisioned_and_back_to_available() {
    let ctx = site("h", json!({}));
    let states = drive(&ctx, "h", settled).await;
    assert_eq!(states, TO_PROVISIONED);
    let stored = ctx.store.host(NS, "h").expect("host");
    assert!(stored.finalizers().iter().any(|f| f == FINALIZER));
    let status = stored.status.expect("status");
    assert!(status.powered_on);
    assert!(status.hardware.is_some(), "inspection recorded hardware");
    assert!(
        ctx.store.hardware_now(NS, "h").is_some(),
        "and HardwareData"
    );
    let secret = ctx.store.stored::<Secret>(NS, "h-bmc").expect("secret");
    assert!(
        secret.owner_references().iter().any(|o| o.name == "h"),
        "the host owns its BMC Secret"
    );
    // Upstream's reasons, in upstream's order, once each.
    let reasons = event_reasons(&ctx);
    let expected = [
        "BMCAccessValidated",
        "Registered",
        "InspectionStarted",
        "InspectionComplete",
        "ProvisioningStarted",
        "ProvisioningComplete",
    ];
    let seen: Vec<&str> = reasons
        .iter()
        .map(String::as_str)
        .filter(|r| expected.contains(r))
        .collect();
    assert_eq!(seen, expected, "all reasons: {reasons:?}");

    // Removing the image deprovisions the host.
    let mut changed = ctx.store.host(NS, "h").expect("host");
    changed.spec.image = None;
    ctx.store.put_host(changed);
    let states = drive(&ctx, "h", in_state(State::Available)).await;
    assert_eq!(
        states,
        [State::Provisioned, State::Deprovisioning, State::Available]
    );
}

#[tokio::test]
async fn a_host_without_bmc_details_is_unmanaged() {
    let ctx = unmanaged_site("u");
    let states = drive(&ctx, "u", in_state(State::Unmanaged)).await;
    assert_eq!(states, [State::None, State::Unmanaged]);
    assert_eq!(step(&ctx, "u").await, Next::After(state_machine::SLOW_POLL));
}

#[tokio::test]
async fn an_externally_provisioned_host_only_has_its_power_managed() {
    let ctx = site("x", json!({"externallyProvisioned": true}));
    let states = drive(&ctx, "x", in_state(State::ExternallyProvisioned)).await;
    assert_eq!(
        states,
        [
            State::None,
            State::Registering,
            State::ExternallyProvisioned
        ]
    );
}

#[tokio::test]
async fn a_paused_host_is_left_alone() {
    let ctx = site("p", json!({}));
    let mut h = ctx.store.host(NS, "p").expect("host");
    h.annotations_mut()
        .insert(crate::api::host::PAUSED_ANNOTATION.into(), String::new());
    ctx.store.put_host(h);
    assert_eq!(step(&ctx, "p").await, Next::OnChange);
    assert_eq!(ctx.store.status_writes(), 0);
    assert!(
        ctx.store
            .host(NS, "p")
            .expect("host")
            .finalizers()
            .is_empty()
    );
}

#[tokio::test]
async fn the_running_clean_step_is_in_the_status_until_the_host_is_prepared() {
    let ctx = context_with_steps(3);
    ctx.store.put(bmc_secret("h-bmc"));
    ctx.store.put_host(host(
        "h",
        json!({"raid": {"hardwareRAIDVolumes": [{"level": "1", "sizeGibibytes": 10}]}}),
    ));
    let step_of = |h: &BareMetalHost| {
        h.status
            .as_ref()
            .and_then(|s| s.provisioning.current_step.clone())
    };
    drive(&ctx, "h", |h| h.is_some_and(|h| step_of(h).is_some())).await;
    let host = ctx.store.host(NS, "h").expect("host");
    assert_eq!(state_of(&host), State::Preparing);
    assert_eq!(
        step_of(&host),
        Some(crate::api::CurrentStep {
            kind: crate::api::StepKind::Clean,
            name: "raid.create_configuration".into(),
        })
    );
    let conditions = host.status.expect("status").conditions;
    assert!(
        conditions
            .iter()
            .any(|c| c.message.contains("raid.create_configuration")),
        "{conditions:?}"
    );
    drive(&ctx, "h", in_state(State::Available)).await;
    let host = ctx.store.host(NS, "h").expect("host");
    assert_eq!(
        step_of(&host),
        None,
        "no step runs once the host is prepared"
    );
}

#[tokio::test]
async fn a_new_host_shows_its_first_state_and_holds_the_finalizer_after_one_reconcile() {
    // No Secret yet: the first state needs nothing read.
    let ctx = context();
    ctx.store.put_host(host("n", json!({})));
    assert_eq!(
        step(&ctx, "n").await,
        Next::After(Duration::from_millis(200))
    );
    let stored = ctx.store.host(NS, "n").expect("host");
    assert_eq!(state_of(&stored), State::Registering);
    assert!(stored.finalizers().iter().any(|f| f == FINALIZER));
    assert_eq!(event_reasons(&ctx), ["Registering"]);
    // The next reconcile reads the Secret, and says that it is missing.
    step(&ctx, "n").await;
    let status = ctx
        .store
        .host(NS, "n")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.error_type, Some(ErrorType::Registration));
}
