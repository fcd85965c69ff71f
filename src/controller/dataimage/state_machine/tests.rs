use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::DataImageSpec;

const URL: &str = "http://images.example/data.iso";

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

fn host(annotations: &[&str]) -> BareMetalHost {
    let mut host = BareMetalHost::new("h", Default::default());
    host.metadata.namespace = Some("ns".into());
    host.metadata.uid = Some("host-uid".into());
    host.metadata.annotations = Some(
        annotations
            .iter()
            .map(|a| ((*a).to_owned(), String::new()))
            .collect(),
    );
    host
}

fn image(url: &str, attached: Option<&str>) -> DataImage {
    let mut image = DataImage::new("h", DataImageSpec { url: url.into() });
    image.metadata.namespace = Some("ns".into());
    image.status = Some(DataImageStatus {
        attached_image: attached.map(|u| AttachedImageReference { url: u.into() }),
        ..Default::default()
    });
    image
}

/// `image` as the DataImage controller leaves it: owned and finalized.
fn kept(mut image: DataImage) -> DataImage {
    image.metadata.owner_references = Some(vec![OwnerReference {
        uid: "host-uid".into(),
        ..Default::default()
    }]);
    image.metadata.finalizers = Some(vec![DATA_IMAGE_FINALIZER.into()]);
    image
}

fn deleted(mut image: DataImage) -> DataImage {
    image.metadata.deletion_timestamp = Some(now());
    image
}

fn cd(inserted: bool, busy: bool, failure: Option<&str>) -> CdRead {
    CdRead::Read(VirtualCd {
        inserted,
        busy,
        failure: failure.map(str::to_owned),
    })
}

fn facts(image: DataImage, host: Option<BareMetalHost>, cd: Option<CdRead>) -> Facts {
    Facts { image, host, cd }
}

/// A case of [`the_controller_owns_finalizes_and_releases_as_upstream`]: what it is,
/// the facts, the step wanted.
type Case = (&'static str, Facts, Step);

/// `plain` (without the finalizer, or kept) before deletion, its host `h` missing,
/// paused or there.
fn cases_of_a_live_image(plain: &DataImage, h: &BareMetalHost) -> Vec<Case> {
    vec![
        (
            "no host, no finalizer",
            facts(plain.clone(), None, None),
            Step::Wait(Requeue::OnChange),
        ),
        (
            "no host",
            facts(kept(plain.clone()), None, None),
            Step::SetFinalizer(false),
        ),
        (
            "paused host",
            facts(plain.clone(), Some(host(&[PAUSED_ANNOTATION])), None),
            Step::Wait(Requeue::OnChange),
        ),
        (
            "new",
            facts(plain.clone(), Some(h.clone()), None),
            Step::AddOwner,
        ),
        (
            "owned",
            facts(kept(plain.clone()), Some(h.clone()), None),
            Step::Wait(Requeue::OnChange),
        ),
    ]
}

/// `plain`, kept, deleted: released at once from a detached host or one without a
/// node, else once its virtual media is ejected.
fn cases_of_a_deleted_image(plain: &DataImage, h: &BareMetalHost) -> Vec<Case> {
    let gone = deleted(kept(plain.clone()));
    let with_cd = |read| facts(gone.clone(), Some(h.clone()), Some(read));
    vec![
        (
            "deleted, detached host",
            facts(gone.clone(), Some(host(&[DETACHED_ANNOTATION])), None),
            Step::SetFinalizer(false),
        ),
        (
            "deleted",
            facts(gone.clone(), Some(h.clone()), None),
            Step::ReadCd,
        ),
        (
            "deleted, no node",
            with_cd(CdRead::NoNode),
            Step::SetFinalizer(false),
        ),
        (
            "deleted, ejected",
            with_cd(cd(false, false, None)),
            Step::SetFinalizer(false),
        ),
        (
            "deleted, busy",
            with_cd(cd(true, true, None)),
            Step::Wait(Requeue::After(BUSY_POLL)),
        ),
        (
            "deleted, inserted",
            with_cd(cd(true, false, None)),
            Step::Detach { status: None },
        ),
    ]
}

#[test]
fn the_controller_owns_finalizes_and_releases_as_upstream() {
    let plain = image(URL, None);
    let h = host(&[]);
    let cases = [
        cases_of_a_live_image(&plain, &h),
        cases_of_a_deleted_image(&plain, &h),
    ];
    for (what, facts, want) in cases.concat() {
        assert_eq!(next(&facts), want, "{what}");
    }
    let mut unfinalized = kept(plain);
    unfinalized.metadata.finalizers = None;
    assert_eq!(
        next(&facts(unfinalized, Some(h), None)),
        Step::SetFinalizer(true)
    );
}

#[test]
fn a_failed_eject_is_reported_and_tried_again() {
    let f = facts(
        deleted(kept(image(URL, Some(URL)))),
        Some(host(&[])),
        Some(cd(
            true,
            false,
            Some("Could not detach device(s) cdrom from node n: BMC said no."),
        )),
    );
    let Step::Detach {
        status: Some((status, message)),
    } = next(&f)
    else {
        panic!("expected a detach with the error saved: {:?}", next(&f));
    };
    assert!(message.starts_with("host ns/h: ejecting"), "{message}");
    assert!(message.contains("BMC said no"), "{message}");
    assert_eq!(status.error.map(|e| e.count), Some(1));
}

#[test]
fn before_power_on_attaches_changes_and_ejects_as_upstream() {
    let (fresh, attached) = (image(URL, None), image(URL, Some(URL)));
    let changed = image("http://images.example/new.iso", Some(URL));
    let gone = deleted(attached.clone());
    let (empty, inserted) = (cd(false, false, None), cd(true, false, None));
    let cases = [
        ("no node", &fresh, &CdRead::NoNode, "proceed"),
        ("busy", &fresh, &cd(false, true, None), "hold"),
        ("nothing yet", &fresh, &empty, "attach"),
        ("attached", &attached, &inserted, "proceed"),
        ("url changed", &changed, &inserted, "detach"),
        ("ejected behind bmo's back", &attached, &empty, "hold"),
        ("deleted, inserted", &gone, &inserted, "detach"),
        ("deleted, ejected", &gone, &empty, "proceed"),
    ];
    for (what, image, cd, want) in cases {
        let got = match before_power_on("ns/h", image, cd, &now()) {
            PowerOnStep::Proceed(_) => "proceed",
            PowerOnStep::Attach => "attach",
            PowerOnStep::Detach { .. } => "detach",
            PowerOnStep::Hold { .. } => "hold",
        };
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn an_attach_that_failed_in_ironic_is_an_error_and_the_host_waits() {
    let reason = "Could not attach device cdrom to node n: HTTP 404 from http://u:s3cret@images.example/data.iso.";
    let image = image(
        "http://u:s3cret@images.example/data.iso",
        Some("http://u:s3cret@images.example/data.iso"),
    );
    let PowerOnStep::Hold {
        status: Some(status),
        event: Some(message),
        requeue,
    } = before_power_on("ns/h", &image, &cd(false, false, Some(reason)), &now())
    else {
        panic!("expected the host held with an error");
    };
    assert_eq!(requeue, Requeue::Backoff);
    assert_eq!(status.attached_image, None);
    assert_eq!(status.last_reconciled, Some(now()));
    let error = status.error.expect("an error");
    assert_eq!(error.count, 1);
    assert_eq!(error.message, message);
    for part in [
        "host ns/h",
        "spec.url",
        "http://images.example/data.iso",
        "HTTP 404",
        "Ironic's conductor can download",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert!(
        !message.contains("s3cret"),
        "the password leaked: {message}"
    );
}

#[test]
fn a_refused_attach_counts_errors_and_a_started_one_records_the_url() {
    let mut failing = image(URL, None);
    failing.status = Some(failed(&failing, "earlier", &now()));
    let (status, event, requeue) = after_attach(
        "ns/h",
        &failing,
        Some("Ironic refused: bad scheme."),
        &now(),
    );
    assert_eq!(status.error.map(|e| e.count), Some(2));
    assert!(event.is_some_and(|m| m.contains("bad scheme")));
    assert_eq!(requeue, Requeue::Backoff);

    let (status, event, requeue) = after_attach("ns/h", &image(URL, None), None, &now());
    assert_eq!(status.attached_image.map(|a| a.url).as_deref(), Some(URL));
    assert_eq!(event, None);
    assert_eq!(requeue, Requeue::After(BUSY_POLL));

    // Once inserted, the error clears and the host powers on.
    let PowerOnStep::Proceed(Some(status)) = before_power_on(
        "ns/h",
        &failing_then_attached(),
        &cd(true, false, None),
        &now(),
    ) else {
        panic!("expected power-on with the error cleared");
    };
    assert_eq!(status.error, None);
}

fn failing_then_attached() -> DataImage {
    let mut image = image(URL, Some(URL));
    let mut status = failed(&image, "earlier", &now());
    status.attached_image = Some(AttachedImageReference { url: URL.into() });
    image.status = Some(status);
    image
}
