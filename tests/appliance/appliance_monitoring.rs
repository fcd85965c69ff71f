//! The alert and recording rules in deploy/monitoring/: accepted by `promtool check
//! rules`, passing their unit tests (`promtool test rules`, Debian's prometheus which
//! tests/env/stack installs), the same in the PrometheusRule as in the plain file,
//! each with its runbook in docs/troubleshooting.md, reading only series bmo exports;
//! the ServiceMonitor scrapes the secured metrics Service.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RULES: &str = "deploy/monitoring/bmo-rules.yaml";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> serde_json::Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `promtool ARGS` in deploy/monitoring/; its output, after asserting success.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(Path::new(ROOT).join("deploy/monitoring"))
        .output()
        .expect("run promtool (tests/env/stack installs Debian's prometheus)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// Every rule of the plain rules file.
fn rules() -> Vec<serde_json::Value> {
    let groups = yaml(RULES)["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!groups.is_empty(), "{RULES} has no groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn name(rule: &serde_json::Value) -> String {
    let name = rule["alert"].as_str().or_else(|| rule["record"].as_str());
    name.expect("a rule names its alert or record").to_owned()
}

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    let _shared = crate::support::shared();
    let checked = promtool(&["check", "rules", "bmo-rules.yaml"]);
    assert!(checked.contains("SUCCESS: 10 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "bmo-rules.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Each alert has a case in the unit tests.
    let tests = read("deploy/monitoring/bmo-rules.test.yaml");
    for rule in rules().iter().filter(|r| r["alert"].is_string()) {
        let alert = name(rule);
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "bmo-rules.test.yaml does not test {alert}"
        );
    }
}

#[test]
fn prometheusrule_holds_the_groups_of_the_rules_file() {
    let _shared = crate::support::shared();
    let resource = yaml("deploy/monitoring/prometheusrule.yaml");
    assert_eq!(resource["kind"], "PrometheusRule");
    assert_eq!(resource["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(resource["spec"]["groups"], yaml(RULES)["groups"]);
}

#[test]
fn every_rule_has_its_runbook_in_troubleshooting() {
    let _shared = crate::support::shared();
    let docs = read("docs/troubleshooting.md");
    let start = docs
        .find("\n## Alerts\n")
        .expect("docs/troubleshooting.md has ## Alerts");
    let section = &docs[start + 1..];
    let section = section[1..]
        .find("\n## ")
        .map_or(section, |end| &section[..=end]);
    for rule in rules() {
        let name = name(&rule);
        if rule["alert"].is_string() {
            let url = format!("docs/troubleshooting.md#{}", name.to_lowercase());
            assert_eq!(rule["annotations"]["runbook_url"], url.as_str(), "{name}");
            assert!(
                section.contains(&format!("\n### {name}\n")),
                "no `### {name}` runbook under ## Alerts"
            );
        } else {
            assert!(
                section.contains(&format!("`{name}`")),
                "{name} not described under ## Alerts"
            );
        }
    }
}

#[test]
fn rules_read_only_series_that_bmo_exports() {
    let _shared = crate::support::shared();
    let exported = [
        read("src/activity/metrics.rs"),
        read("src/metrics/mod.rs"),
        read("src/controller/runtime/observed.rs"),
    ]
    .concat();
    let series = regex::Regex::new(r"\b(bmo|controller_runtime)_[a-z_]+").unwrap();
    let mut seen = 0;
    for rule in rules() {
        let expr = rule["expr"].as_str().unwrap();
        for found in series.find_iter(expr) {
            let metric = found.as_str();
            let registered = metric.strip_suffix("_total").unwrap_or(metric);
            assert!(
                exported.contains(&format!("\"{registered}\"")),
                "{} reads {metric}, which bmo does not export",
                name(&rule)
            );
            seen += 1;
        }
    }
    assert!(seen >= 8, "only {seen} series found in the rules");
}

#[test]
fn servicemonitor_scrapes_the_secured_metrics_service_over_https() {
    let _shared = crate::support::shared();
    let monitor = yaml("deploy/monitoring/servicemonitor.yaml");
    let service = yaml("deploy/metrics/service.yaml");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["namespace"],
        service["metadata"]["namespace"]
    );
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    assert!(!wanted.is_empty());
    for (key, value) in wanted {
        assert_eq!(&service["metadata"]["labels"][key], value, "label {key}");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    let ports = service["spec"]["ports"].as_array().unwrap();
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "the Service has no port named {}",
        endpoint["port"]
    );
    let kustomization = read("deploy/monitoring/kustomization.yaml");
    for file in ["prometheusrule.yaml", "servicemonitor.yaml"] {
        assert!(kustomization.contains(&format!("- {file}")), "{file}");
    }
}
