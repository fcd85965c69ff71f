//! The OLM bundle in deploy/olm says what deploy/ says: the same CRDs, the same RBAC
//! rules and the same Deployment, so a catalogue install and `kubectl apply -k
//! deploy/` run bmo identically.

use std::path::Path;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn documents(path: &str) -> Vec<Value> {
    read(path)
        .split("\n---\n")
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
        })
        .map(|d| serde_norway::from_str(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

fn csv() -> Value {
    documents("deploy/olm/manifests/bmo.clusterserviceversion.yaml").remove(0)
}

#[test]
fn bundle_crds_are_the_generated_ones() {
    let _shared = crate::support::shared();
    let owned: Vec<String> = csv()["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .expect("owned CRDs")
        .iter()
        .map(|c| c["name"].as_str().expect("name").to_owned())
        .collect();
    for entry in std::fs::read_dir(Path::new(ROOT).join("deploy/crds")).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert_eq!(
            read(&format!("deploy/crds/{file}")),
            read(&format!("deploy/olm/manifests/{file}")),
            "deploy/olm/manifests/{file} is stale: cp deploy/crds/{file} deploy/olm/manifests/"
        );
        let crd = documents(&format!("deploy/crds/{file}")).remove(0);
        let name = crd["metadata"]["name"].as_str().expect("CRD name");
        assert!(owned.iter().any(|o| o == name), "CSV does not own {name}");
    }
}

#[test]
fn bundle_permissions_are_deploy_rbac() {
    let _shared = crate::support::shared();
    let roles = documents("deploy/rbac/role.yaml");
    let rules_of = |kind: &str| {
        roles
            .iter()
            .find(|d| d["kind"] == kind)
            .map(|d| d["rules"].clone())
            .unwrap_or_else(|| panic!("no {kind} in role.yaml"))
    };
    let install = &csv()["spec"]["install"]["spec"];
    assert_eq!(
        install["clusterPermissions"][0]["rules"],
        rules_of("ClusterRole")
    );
    assert_eq!(install["permissions"][0]["rules"], rules_of("Role"));
    let account = documents("deploy/rbac/service_account.yaml").remove(0);
    assert_eq!(
        install["clusterPermissions"][0]["serviceAccountName"],
        account["metadata"]["name"]
    );
}

#[test]
fn bundle_deployment_is_deploy_manager() {
    let _shared = crate::support::shared();
    let manager = documents("deploy/manager/manager.yaml").remove(0);
    let csv = csv();
    let deployment = &csv["spec"]["install"]["spec"]["deployments"][0];
    assert_eq!(deployment["name"], manager["metadata"]["name"]);
    let mut expected = manager["spec"].clone();
    let mut actual = deployment["spec"].clone();
    // Only the image differs: kustomize sets it for deploy/, the CSV names it.
    let image = actual["template"]["spec"]["containers"][0]["image"].take();
    expected["template"]["spec"]["containers"][0]["image"].take();
    assert_eq!(actual, expected);
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], image);
}

#[test]
fn bundle_example_is_a_valid_host() {
    let _shared = crate::support::shared();
    let examples = csv()["metadata"]["annotations"]["alm-examples"]
        .as_str()
        .expect("alm-examples")
        .to_owned();
    let examples: Vec<Value> = serde_json::from_str(&examples).expect("alm-examples is JSON");
    for example in examples {
        let host: bmo::api::BareMetalHost =
            serde_json::from_value(example).expect("example is a BareMetalHost");
        let address = host.spec.bmc.expect("bmc").address;
        bmo::bmc::BmcAddress::parse(&address).expect("example BMC address parses");
    }
}

#[test]
fn bundle_metadata_names_the_package_and_channel() {
    let _shared = crate::support::shared();
    let annotations = documents("deploy/olm/metadata/annotations.yaml").remove(0);
    let a = &annotations["annotations"];
    assert_eq!(
        a["operators.operatorframework.io.bundle.mediatype.v1"],
        "registry+v1"
    );
    assert_eq!(
        a["operators.operatorframework.io.bundle.manifests.v1"],
        "manifests/"
    );
    assert_eq!(a["operators.operatorframework.io.bundle.package.v1"], "bmo");
    let containerfile = read("deploy/olm/bundle.Containerfile");
    for (key, value) in a.as_object().expect("annotations") {
        let label = format!("LABEL {key}={}", value.as_str().expect("string"));
        assert!(
            containerfile.contains(&label),
            "bundle.Containerfile lacks {label}"
        );
    }
}
