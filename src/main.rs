//! The `bmo` command line. Parses arguments and calls into the library.

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
    Run(Config),
    /// Print the provisioning IP bmo would use, and why.
    DetectIp {
        #[command(flatten)]
        provisioning: bmo::netboot::config::ProvisioningNetwork,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print version, git commit, build date and rustc version.
    Version {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    bmo::tls::install_crypto_provider();
    match cli.command {
        Command::Run(config) => {
            telemetry::init(config.log_format, "info");
            bmo::run::run(config).await?;
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
