//! Watching a host through a VM test: its provisioning state in Kubernetes and its
//! node's provision state in Ironic, each noted with the time it was first seen (the
//! phase tables of docs/performance.md come from these marks); the VM's console.

use std::time::{Duration, Instant};

use bmo::api::BareMetalHost;
use bmo::ironic::IronicClient;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::lab::{Lab, Vm};

/// Watches one host: its provisioning state in Kubernetes and its node's provision
/// state in Ironic, noting when each state was first seen.
pub struct Watch<'a> {
    pub api: Api<BareMetalHost>,
    pub name: String,
    pub ironic: IronicClient,
    pub node: String,
    pub lab: &'a Lab,
    pub vm: &'a Vm,
    pub start: Instant,
    pub marks: Vec<(String, Duration)>,
}

impl Watch<'_> {
    /// Notes `what` unless it is already the latest mark of its source (the text
    /// before ": ", e.g. "host" or "ironic").
    pub fn mark(&mut self, what: &str) {
        let source = what.split_once(": ").map(|(s, _)| s);
        let latest = self
            .marks
            .iter()
            .rev()
            .find(|(w, _)| w.split_once(": ").map(|(s, _)| s) == source)
            .map(|(w, _)| w.as_str());
        if latest != Some(what) {
            let at = self.start.elapsed();
            eprintln!("vm {}: {:>7.1} s  {what}", self.name, at.as_secs_f64());
            self.marks.push((what.to_owned(), at));
        }
    }

    /// When `what` was first seen after `after` was.
    pub fn at(&self, what: &str, after: Option<Duration>) -> Option<Duration> {
        let after = after.unwrap_or_default();
        self.marks
            .iter()
            .find(|(w, d)| w == what && *d >= after)
            .map(|(_, d)| *d)
    }

    /// Polls every second until `done` holds for the host; panics after `timeout`
    /// with the host's status, the console and the lab's logs.
    pub async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(node)) = self.ironic.get_node(&self.node).await {
                let state = node.provision_state.unwrap_or_default();
                self.mark(&format!("ironic: {state}"));
                let step = node.clean_step.unwrap_or_default();
                if let (Some(i), Some(s)) = (step["interface"].as_str(), step["step"].as_str()) {
                    self.mark(&format!("ironic clean step: {i}.{s}"));
                }
            }
            let status = match self.api.get(&self.name).await {
                Ok(host) => status(&host),
                Err(e) => json!({"error": e.to_string()}),
            };
            if let Some(state) = status["provisioning"]["state"].as_str() {
                self.mark(&format!("host: {state}"));
            }
            let step = &status["provisioning"]["currentStep"];
            if let (Some(kind), Some(name)) = (step["type"].as_str(), step["name"].as_str()) {
                self.mark(&format!("step: {kind} {name}"));
            }
            if done(&status) {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; host status: {status}\n--- console:\n{}\n{}",
                    tail(&self.vm.console(), 60),
                    self.lab.logs_tail()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub async fn patch(&self, body: Value) {
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .expect("patch the host");
    }
}

pub fn status(host: &BareMetalHost) -> Value {
    serde_json::to_value(host)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .unwrap_or(Value::Null)
}

pub fn state_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["provisioning"]["state"] == json!(state)
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub async fn wait_console(vm: &Vm, lab: &Lab, needle: &str, times: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while vm.console().matches(needle).count() < times {
        if Instant::now() >= deadline {
            panic!(
                "the console did not show {needle:?} {times} time(s) within {timeout:?}:\n{}\n{}",
                tail(&vm.console(), 80),
                lab.logs_tail()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
