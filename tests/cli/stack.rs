//! The test stack itself: interrupting it leaves nothing behind, and its Ironic
//! basic-auth mode really demands credentials.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bmo::ironic::{ClientConfig, IronicAuth, IronicClient, IronicError};

use crate::support::{BmoProcess, Stack, eventually, free_port, unique_name};

fn stack_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/stack")
}

#[test]
fn interrupting_the_stack_at_any_point_leaves_nothing_behind() {
    // Starts and stops whole stacks (five in all), which keeps the machine busy for
    // minutes: with this file's tests only, as when this file was a binary of its own.
    let _alone = crate::support::exclusive("stack");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/check-teardown");
    let out = Command::new(script).output().expect("run check-teardown");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("4 passed, 0 failed"), "{text}");
}

/// A second stack with `BMO_STACK_IRONIC_AUTH=http_basic`, stopped when dropped.
struct BasicAuthStack {
    env_file: std::path::PathBuf,
}

impl Drop for BasicAuthStack {
    fn drop(&mut self) {
        let _ = Command::new(stack_script())
            .arg("down")
            .arg(&self.env_file)
            .status();
    }
}

#[tokio::test]
async fn basic_auth_ironic_refuses_anonymous_clients_and_bmo_uses_the_auth_files() {
    // Starts and stops whole stacks (five in all), which keeps the machine busy for
    // minutes: with this file's tests only, as when this file was a binary of its own.
    let _alone = crate::support::exclusive("stack");
    let env_file = std::env::temp_dir().join(format!("{}.env", unique_name("basic-auth-stack")));
    let guard = BasicAuthStack {
        env_file: env_file.clone(),
    };
    let up = Command::new(stack_script())
        .arg("up")
        .env("BMO_STACK_ENV", &env_file)
        .env("BMO_STACK_IRONIC_AUTH", "http_basic")
        .env("BMO_STACK_REDFISH_SYSTEMS", "1")
        .output()
        .expect("run stack up");
    assert!(
        up.status.success(),
        "stack up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let stack = Stack::load_from(env_file.clone()).expect("basic-auth stack env file");
    assert!(matches!(stack.ironic_auth, IronicAuth::Basic(_)));

    let anonymous = IronicClient::connect(ClientConfig::new(stack.ironic_endpoint.clone())).await;
    match anonymous {
        Err(err @ IronicError::Unauthorized { .. }) => {
            assert!(err.to_string().contains("METAL3_AUTH_ROOT_DIR"), "{err}")
        }
        other => panic!("anonymous client should be refused, got {other:?}"),
    }
    let ironic = stack.ironic().await;
    assert!(
        ironic
            .list_nodes()
            .await
            .expect("authenticated list")
            .is_empty()
    );

    // bmo run reads the same credentials from METAL3_AUTH_ROOT_DIR/ironic/.
    let port = free_port();
    let health = format!("127.0.0.1:{port}");
    let kubeconfig = stack.kubeconfig.display().to_string();
    let bmo = BmoProcess::start(
        &["run"],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str()),
            (
                "METAL3_AUTH_ROOT_DIR",
                stack.var("METAL3_AUTH_ROOT_DIR").expect("auth dir"),
            ),
            ("BMO_HEALTH_ADDR", &health),
        ],
    );
    let password = match &stack.ironic_auth {
        IronicAuth::Basic(c) => c.password.expose().to_owned(),
        IronicAuth::None => unreachable!(),
    };
    let http = reqwest::Client::new();
    let url = format!("http://{health}/readyz");
    eventually(
        "bmo to connect with basic auth",
        Duration::from_secs(30),
        || async {
            let log = bmo.log();
            if log.contains("auth=\"http basic\"")
                && http.get(&url).send().await.is_ok_and(|r| r.status() == 200)
            {
                Ok(())
            } else {
                Err(log)
            }
        },
    )
    .await;
    assert!(
        !bmo.log().contains(&password),
        "bmo logged the Ironic password"
    );
    drop(bmo);
    drop(guard);
    assert!(!env_file.exists(), "stack down left its env file");
}
