//! The `bmo` command line. Parses arguments and calls into the library.

use anyhow::Context;
use clap::{Parser, Subcommand};

use bmo::config::Config;
use bmo::telemetry;
use bmo::version::BUILD;

/// bmo: bare-metal host provisioning for Kubernetes.
///
/// Reconciles metal3.io/v1alpha1 BareMetalHost objects by driving OpenStack Ironic,
/// and serves the provisioning network's DHCP, TFTP and HTTP boot from the same binary.
#[derive(Debug, Parser)]
#[command(name = "bmo", version = BUILD.version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up; the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: host controller and provisioning network services.
    Run(Box<Config>),
    /// Print the CRDs of all 13 metal3.io kinds and the admission policies as YAML.
    Crds {
        /// Write them as files under this directory (crds/, admission/) instead,
        /// e.g. `bmo crds --out-dir deploy` to refresh the checked-in copies.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
    /// Check a BMC address: print the Ironic driver, interfaces and driver_info it
    /// becomes (credentials are never shown), or say what is wrong with it.
    Bmc {
        /// The address, as in spec.bmc.address (e.g. redfish://10.0.0.5/redfish/v1/Systems/1).
        address: String,
        /// As spec.bmc.disableCertificateVerification.
        #[arg(long)]
        disable_certificate_verification: bool,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the provisioning IP bmo would use, and why.
    DetectIp {
        #[command(flatten)]
        provisioning: bmo::netboot::config::ProvisioningNetwork,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a BareMetalHost and its BMC Secret as YAML, from flags checked the way
    /// the CRD checks them; pipe into `kubectl apply -f -`.
    MakeHost(Box<bmo::make_host::MakeHostArgs>),
    /// Print version, git commit, build date and rustc version.
    Version {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    // Before the runtime starts its threads.
    bmo::malloc::tune();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(run_command(Cli::parse()))
}

async fn run_command(cli: Cli) -> anyhow::Result<()> {
    bmo::tls::install_crypto_provider();
    match cli.command {
        Command::Run(config) => {
            telemetry::init(config.log_format, "info");
            bmo::run::run(*config).await?;
        }
        Command::Crds { out_dir } => match out_dir {
            None => print!("{}", bmo::api::crd::render_all()?),
            Some(dir) => {
                for manifest in bmo::api::crd::manifests()? {
                    let path = dir.join(&manifest.path);
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).with_context(|| {
                            format!("cannot create directory {}", parent.display())
                        })?;
                    }
                    std::fs::write(&path, manifest.yaml)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    println!("wrote {}", path.display());
                }
            }
        },
        Command::Bmc {
            address,
            disable_certificate_verification,
            json,
        } => {
            let parsed = match bmo::bmc::BmcAddress::parse(&address) {
                Ok(parsed) => parsed,
                Err(e) => {
                    eprintln!("bmo bmc: {e}");
                    std::process::exit(2);
                }
            };
            let report = bmo::bmc::AddressReport::new(&parsed, disable_certificate_verification);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_text());
            }
        }
        Command::DetectIp { provisioning, json } => {
            telemetry::init(bmo::telemetry::LogFormat::Human, "warn");
            let selector = bmo::netboot::address::Selector::from_config(&provisioning)?;
            let choice =
                bmo::netboot::address::wait_for_address(&selector, provisioning.wait()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&choice)?);
            } else {
                println!("{}", choice.ip);
                println!("interface: {}", choice.interface.as_deref().unwrap_or("-"));
                println!("reason:    {}", choice.reason);
            }
        }
        Command::MakeHost(args) => match bmo::make_host::make_host(&args) {
            Ok(manifests) => print!("{}", manifests.to_yaml()?),
            Err(e) => {
                eprintln!("bmo make-host: {e}");
                std::process::exit(2);
            }
        },
        Command::Version { json } => {
            if json {
                println!("{}", serde_json::to_string_pretty(&BUILD)?);
            } else {
                println!("bmo {}", BUILD.version);
                println!("git commit: {}", BUILD.git_commit);
                println!("build date: {}", BUILD.build_date);
                println!("rustc:      {}", BUILD.rustc);
            }
        }
    }
    Ok(())
}
