//! controller-runtime's reconcile series, with its names and labels, so dashboards
//! and alerts written for upstream's operator read bmo's controllers too:
//! `controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total{controller}`,
//! `controller_runtime_reconcile_time_seconds{controller}` and
//! `controller_runtime_active_workers{controller}`. The `controller` label is the
//! kind in lower case, as upstream names its controllers (`baremetalhost`).

use std::future::Future;
use std::sync::LazyLock;
use std::time::Instant;

use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

/// controller-runtime's buckets of `reconcile_time_seconds`, in seconds.
const BUCKETS: [f64; 25] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 60.0,
];

struct Reconciles {
    total: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabel, Counter>,
    time: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    active: Family<ControllerLabel, Gauge>,
}

/// One set for the process, as controller-runtime's global registry: every
/// controller adds to it, and each `/metrics` registry shows it.
static RECONCILES: LazyLock<Reconciles> = LazyLock::new(|| Reconciles {
    total: Family::default(),
    errors: Family::default(),
    time: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
    active: Family::default(),
});

/// Adds the series to `registry` (prometheus-client appends `_total` to counters).
pub fn register(registry: &mut Registry) {
    let r = &*RECONCILES;
    // controller-runtime's names; each help text ends "per controller".
    let [total, errors, time, active] = [
        (
            "controller_runtime_reconcile",
            "Total number of reconciliations",
        ),
        (
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors",
        ),
        (
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation",
        ),
        (
            "controller_runtime_active_workers",
            "Number of currently used workers",
        ),
    ]
    .map(|(name, help)| (name, format!("{help} per controller")));
    registry.register(total.0, total.1, r.total.clone());
    registry.register(errors.0, errors.1, r.errors.clone());
    registry.register(time.0, time.1, r.time.clone());
    registry.register(active.0, active.1, r.active.clone());
}

/// Runs one reconcile of `controller`, counting it as controller-runtime does:
/// `error`, `requeue_after` (an Ok that asks to look again later) or `success`.
pub async fn observed<E>(
    controller: &str,
    reconcile: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E> {
    let r = &*RECONCILES;
    let label = ControllerLabel {
        controller: controller.to_owned(),
    };
    let active = r.active.get_or_create(&label).clone();
    active.inc();
    let start = Instant::now();
    let result = reconcile.await;
    active.dec();
    r.time
        .get_or_create(&label)
        .observe(start.elapsed().as_secs_f64());
    let outcome = match &result {
        Err(_) => {
            r.errors.get_or_create(&label).inc();
            "error"
        }
        Ok(action) if *action == Action::await_change() => "success",
        Ok(_) => "requeue_after",
    };
    r.total
        .get_or_create(&ResultLabels {
            controller: label.controller,
            result: outcome,
        })
        .inc();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reconciles_are_counted_by_result_under_controller_runtimes_names() {
        let _ = observed::<()>("testkind", async { Ok(Action::await_change()) }).await;
        let _ = observed::<()>("testkind", async {
            Ok(Action::requeue(Duration::from_secs(1)))
        })
        .await;
        let _ = observed("testkind", async { Err::<Action, _>(()) }).await;
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"controller_runtime_reconcile_total{controller="testkind",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="testkind",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_total{controller="testkind",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="testkind"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="testkind"} 3"#,
            r#"controller_runtime_active_workers{controller="testkind"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
