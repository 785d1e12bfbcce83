//! The subcommands besides `run`: `crd` and `render` (offline), `diff` and
//! `rollout status` (read-only).

pub mod rollout_status;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kura_core::api::{KuraInstance, crd_documents};
use kura_core::config::OperatorConfig;
use kura_core::render::{self, hash};
use kura_core::validate::validate;

#[derive(clap::Args)]
pub struct RenderArgs {
    /// KuraInstance manifest(s) (YAML; several documents allowed).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Operator configuration file.
    #[arg(long, env = "KURA_CONFIG")]
    config: PathBuf,
    /// Say which inputs fed the revision.
    #[arg(long)]
    explain: bool,
    /// Print only the revision of each instance.
    #[arg(long)]
    revision_only: bool,
}

pub type CliResult = Result<(), Box<dyn std::error::Error>>;

pub fn crd(output_dir: Option<&Path>) -> CliResult {
    for (file, yaml) in crd_documents() {
        match output_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                std::fs::write(dir.join(file), &yaml)?;
            }
            None => emit(&format!("---\n{yaml}"))?,
        }
    }
    Ok(())
}

/// Writes to stdout. A reader that went away (`... | head`) ends the output
/// with an error `main` takes for a quiet end ([`is_broken_pipe`]), where
/// `print!` would panic.
fn emit(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Whether `e` is stdout's reader having gone away.
pub fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Prints the report; the exit code says whether anything would change.
pub fn diff(
    args: kura_operator::diff::command::DiffArgs,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let json = args.output == "json";
    let report = kura_operator::diff::command::main(args)?;
    let text = if json { report.json() } else { report.text() };
    match emit(&text) {
        // The answer is the exit code, whoever reads the text.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::from(report.exit_code())),
    }
}

pub fn render(args: &RenderArgs) -> CliResult {
    let config = OperatorConfig::load(&args.config)?;
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut failed = false;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let instance: KuraInstance =
            serde_yaml::from_value(value).map_err(|e| format!("{}: {e}", args.file.display()))?;
        let name = instance.metadata.name.clone().unwrap_or_default();
        let validated = match validate(&instance, &config) {
            Ok(v) => v,
            Err(errors) => {
                for e in &errors.0 {
                    eprintln!("{name}: {e}");
                }
                failed = true;
                continue;
            }
        };
        let desired = render::render(&validated, &config);
        let mut out = String::new();
        if args.revision_only {
            writeln!(out, "{name} {}", desired.revision)?;
            emit(&out)?;
            continue;
        }
        writeln!(
            out,
            "# instance {name}: revision {} (pod template {})",
            desired.revision, desired.pod_template_hash
        )?;
        for o in &desired.objects {
            writeln!(out, "#   {} hash {}", o.id, o.hash)?;
        }
        if args.explain {
            explain(&validated, &config, &desired, &mut out)?;
        }
        for o in &desired.objects {
            write!(out, "---\n{}", serde_yaml::to_string(&o.body())?)?;
        }
        emit(&out)?;
    }
    if failed {
        Err("invalid input; nothing rendered for the instances above".into())
    } else {
        Ok(())
    }
}

use serde::Deserialize;

/// What a user typed, or `(none)`: never a Rust debug form.
fn shown(value: Option<&str>) -> &str {
    value.filter(|v| !v.is_empty()).unwrap_or("(none)")
}

fn explain(
    v: &kura_core::validate::ValidatedInstance,
    config: &OperatorConfig,
    desired: &render::Desired,
    out: &mut String,
) -> std::fmt::Result {
    let region = &config.regions[&v.region];
    let network = match region.network {
        kura_core::config::NetworkMode::Cloud => "cloud",
        kura_core::config::NetworkMode::Host => "host",
    };
    let aliases = if v.aliases.is_empty() {
        "(none)".to_string()
    } else {
        v.aliases.join(",")
    };
    writeln!(
        out,
        "# the revision is sha256 over the per-object hashes above, in that order; each object hash"
    )?;
    writeln!(
        out,
        "# is sha256 of the object's canonical JSON. The rendered objects came from:"
    )?;
    writeln!(
        out,
        "#   spec: account={} region={} image={} replicas={} host={} aliases={aliases}",
        v.account, v.region, v.image, v.replicas, v.host
    )?;
    writeln!(
        out,
        "#   spec: storage={} class={} env={} variables",
        v.storage_size,
        shown(v.storage_class.as_deref()),
        v.env.len()
    )?;
    writeln!(
        out,
        "#   config regions.{}: network={network} sharedIngressClass={} domain={} storageClass={}",
        v.region,
        region.shared_ingress_class,
        region.domain,
        shown(region.storage_class.as_deref())
    )?;
    writeln!(
        out,
        "#   storage is fixed when the StatefulSet is created: a running instance keeps the class and size"
    )?;
    writeln!(
        out,
        "#   its StatefulSet has, and reports any other as StorageChangePending (claim templates cannot change)"
    )?;
    explain_gateway(v, config, out)?;
    writeln!(
        out,
        "#   metadata: name={} namespace={} uid={} (owner references)",
        v.name,
        v.namespace,
        shown(Some(v.uid.as_str()))
    )?;
    writeln!(
        out,
        "#   short revision: {}",
        hash::short(&desired.revision)
    )
}

/// The gateway lines of [`explain`].
fn explain_gateway(
    v: &kura_core::validate::ValidatedInstance,
    config: &OperatorConfig,
    out: &mut String,
) -> std::fmt::Result {
    let mode = match v.gateway.mode {
        kura_core::api::GatewayMode::Auto => "Auto",
        kura_core::api::GatewayMode::Dedicated => "Dedicated",
        kura_core::api::GatewayMode::Shared => "Shared",
    };
    writeln!(
        out,
        "#   resolved gateway: mode={mode} ingressClass={} gateway={}",
        v.gateway.ingress_class_name,
        shown(v.gateway.gateway_name.as_deref())
    )?;
    if v.gateway.gateway_name.is_some() {
        writeln!(
            out,
            "#   config gateway: image={} controller={} replicas={}",
            config.gateway.image, config.gateway.controller, config.gateway.replicas
        )?;
    }
    Ok(())
}
