//! Failing hosts: the error backoff, a Secret applied late, a lost write race, a bad
//! BMC address, credentials changed while the provisioner is busy.

use super::*;

/// The requeue must fall in `2^count` minutes less up to half, capped at `max`.
fn assert_backoff(next: Next, count: i64, max: Duration) {
    let full = Duration::from_secs(60 * (1 << count)).min(max);
    match next {
        Next::After(d) => assert!(
            d >= full / 2 && d <= full,
            "error {count}: {d:?} outside {:?}..={full:?}",
            full / 2
        ),
        other => panic!("error {count}: {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_host_is_looked_at_once_per_backoff_step() {
    let ctx = site("f", json!({}));
    drive(&ctx, "f", in_state(State::Registering)).await;
    ctx.provisioner
        .fail("ns~f", FixtureOperation::Register, "BMC said no");
    for count in 1..=4 {
        let next = step(&ctx, "f").await;
        let status = ctx
            .store
            .host(NS, "f")
            .and_then(|h| h.status)
            .expect("status");
        assert_eq!(status.error_count, count);
        assert_eq!(status.error_type, Some(ErrorType::Registration));
        assert_eq!(status.operational_status, OperationalStatus::Error);
        assert_backoff(next, count, ctx.settings.max_backoff);
    }
    // BMO_MAX_BACKOFF caps the wait.
    for _ in 0..4 {
        step(&ctx, "f").await;
    }
    assert_backoff(step(&ctx, "f").await, 9, ctx.settings.max_backoff);

    // Fixed: the next look registers it and clears the error.
    ctx.provisioner
        .clear_failure("ns~f", FixtureOperation::Register);
    drive(&ctx, "f", in_state(State::Inspecting)).await;
    let status = ctx
        .store
        .host(NS, "f")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.error_count, 0);
}

#[tokio::test]
async fn a_host_applied_before_its_secret_backs_off_then_registers() {
    let ctx = context();
    ctx.store.put_host(host("s", json!({})));
    drive(&ctx, "s", in_state(State::Registering)).await;
    for count in 1..=3 {
        assert_backoff(step(&ctx, "s").await, count, ctx.settings.max_backoff);
    }
    let status = ctx
        .store
        .host(NS, "s")
        .and_then(|h| h.status)
        .expect("status");
    assert!(
        status.error_message.contains("not found"),
        "{}",
        status.error_message
    );
    ctx.store.put(bmc_secret("s-bmc"));
    drive(&ctx, "s", in_state(State::Inspecting)).await;
}

#[tokio::test]
async fn a_lost_finalizer_race_keeps_the_other_writer_and_retries() {
    let ctx = site("c", json!({}));
    let read = ctx.store.host(NS, "c").expect("host");
    // Another controller adds its finalizer between bmo's read and its write.
    ctx.store
        .add_foreign_finalizer("example.com/other", NS, "c");
    let result = reconcile_host(&read, &ctx).await;
    assert!(
        result.as_ref().is_err_and(ReconcileError::is_conflict),
        "{result:?}"
    );
    let stored = ctx.store.host(NS, "c").expect("host");
    assert_eq!(stored.finalizers(), ["example.com/other"]);

    // The retry reads the host again and keeps both.
    step(&ctx, "c").await;
    let stored = ctx.store.host(NS, "c").expect("host");
    assert_eq!(stored.finalizers(), ["example.com/other", FINALIZER]);
}

#[tokio::test]
async fn a_bad_bmc_address_is_one_registration_error_until_the_spec_changes() {
    let ctx = site("b", json!({}));
    drive(&ctx, "b", in_state(State::Registering)).await;
    let mut h = ctx.store.host(NS, "b").expect("host");
    if let Some(bmc) = h.spec.bmc.as_mut() {
        bmc.address = "nonsense://b".into();
    }
    ctx.store.put_host(h);
    assert_eq!(step(&ctx, "b").await, Next::OnChange);
    let status = ctx
        .store
        .host(NS, "b")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.error_type, Some(ErrorType::Registration));
    assert!(status.error_message.contains("spec.bmc.address"));
}

#[tokio::test]
async fn credentials_changed_while_the_provisioner_is_busy_are_sent_once_it_rests() {
    let ctx = site("busy", json!({"image": null}));
    drive(&ctx, "busy", in_state(State::Available)).await;
    // The Secret versions in status.triedCredentials and status.goodCredentials.
    let versions = |ctx: &TestContext| {
        let status = ctx.store.host(NS, "busy").and_then(|h| h.status);
        let version = |c: Option<&crate::api::CredentialsStatus>| {
            c.and_then(|c| c.credentials_version.clone())
        };
        (
            version(status.as_ref().and_then(|s| s.tried_credentials.as_ref())),
            version(status.as_ref().and_then(|s| s.good_credentials.as_ref())),
        )
    };
    let tried = |ctx: &TestContext| versions(ctx).0;
    let before = tried(&ctx);
    assert!(before.is_some(), "the first credentials were tried");
    // The password is fixed while the node is in a transient state (e.g. verifying).
    ctx.provisioner.set_busy("ns~busy", true);
    let mut fixed = bmc_secret("busy-bmc");
    fixed
        .data
        .get_or_insert_with(Default::default)
        .insert("password".into(), ByteString(b"fixed".to_vec()));
    ctx.store.put(fixed);
    let updates = |ctx: &TestContext| {
        ctx.provisioner
            .host("ns~busy")
            .map_or(0, |h| h.credential_updates)
    };
    let sent_before = updates(&ctx);
    step(&ctx, "busy").await;
    step(&ctx, "busy").await;
    assert_eq!(
        tried(&ctx),
        before,
        "credentials not sent are not recorded as tried"
    );
    assert_eq!(updates(&ctx), sent_before);
    // Once the node rests, the next registration sends them.
    ctx.provisioner.set_busy("ns~busy", false);
    step(&ctx, "busy").await;
    assert_eq!(
        updates(&ctx),
        sent_before + 1,
        "the new credentials were sent"
    );
    let (tried_now, good_now) = versions(&ctx);
    assert!(
        tried_now.is_some() && tried_now != before,
        "{tried_now:?} recorded as tried"
    );
    assert_eq!(good_now, tried_now, "and, as the BMC took them, as good");
}
