//! The secured `/metrics` (`BMO_METRICS_SECURE_ADDR`) against the real kube-apiserver,
//! as upstream's `metrics_service` scenario: a ServiceAccount token bound to the
//! metrics-reader role reads the metrics (200), a token without it is refused (403),
//! and a missing or unknown token is not authenticated (401).

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::{bmo_run, create_fake_host, eventually, free_port, installed_namespace};

async fn service_account_token(client: &kube::Client, ns: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("ServiceAccount");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create ServiceAccount");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("token request")
        .status
        .and_then(|s| s.token)
        .expect("token issued")
}

#[tokio::test]
async fn secured_metrics_answer_only_tokens_the_api_server_authorises() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("metrics-secured").await;
    let reader = service_account_token(&client, &ns, "scraper").await;
    let stranger = service_account_token(&client, &ns, "stranger").await;
    // The role deploy/metrics/reader_role.yaml ships, bound to the scraper only.
    let role_name = format!("{ns}-metrics-reader");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))
    .expect("ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}]
    }))
    .expect("ClusterRoleBinding");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("create ClusterRole");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("create ClusterRoleBinding");

    let addr = format!("127.0.0.1:{}", free_port());
    let (bmo, _) = bmo_run(&ns, &[("BMO_METRICS_SECURE_ADDR", addr.as_str())]);
    // bmo makes its own certificate: the test trusts whatever it presents.
    let https = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("HTTPS client");
    let url = format!("https://{addr}/metrics");
    let status_with = |token: Option<&str>| {
        let mut request = https.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, body))
        }
    };
    let bmo = &bmo;
    let (status, body) = eventually(
        "the secured /metrics to answer",
        Duration::from_secs(60),
        || {
            let answer = status_with(Some(&reader));
            async move {
                answer
                    .await
                    .map_err(|e| format!("{e}; log: {}", bmo.log_tail(3)))
            }
        },
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("metal3_"), "the metrics: {body}");
    // When its certificate (self-signed here, for the year 4096) expires.
    assert!(
        body.contains("bmo_metrics_certificate_expiry_timestamp_seconds 67090118400"),
        "the certificate's expiry: {body}"
    );
    // controller-runtime's series, named and labelled as upstream's operator exports them.
    create_fake_host(&client, &ns, "counted").await;
    eventually(
        "the host controller's reconciles to be counted",
        Duration::from_secs(60),
        || async {
            let (_, body) = status_with(Some(&reader)).await?;
            let counted = body.contains(
                r#"controller_runtime_reconcile_total{controller="baremetalhost",result="#,
            ) && body.contains(
                r#"controller_runtime_reconcile_time_seconds_count{controller="baremetalhost"}"#,
            ) && body
                .contains(r#"controller_runtime_active_workers{controller="baremetalhost"}"#);
            if counted { Ok(()) } else { Err(body) }
        },
    )
    .await;
    for (token, expected) in [
        (None, 401),
        (Some("not-a-token"), 401),
        (Some(stranger.as_str()), 403),
        (Some(reader.as_str()), 200),
    ] {
        let (status, _) = status_with(token).await.expect("an answer");
        assert_eq!(status, expected, "token {:?}", token.map(|_| "given"));
    }
    let (status, _) = status_with(Some(&reader)).await.expect("an answer");
    assert_eq!(status, 200);
    let plain = reqwest::get(format!("http://{addr}/metrics")).await;
    assert!(
        plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()),
        "no plain HTTP on the secured port"
    );

    let _ = bindings.delete(&role_name, &DeleteParams::default()).await;
    let _ = roles.delete(&role_name, &DeleteParams::default()).await;
}
