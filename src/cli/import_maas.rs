//! `metalform import-maas --site S [--profile P] --sku K --gpus N [--group G] [--out FILE]
//! [--write-secrets]` (issue 15 "adopt what already runs"): the machines a live MAAS lists,
//! Deployed ones included, become a NodeGroup manifest (stdout, or FILE) that `plan` adopts
//! instead of redeploying. BMC logins other than the site's default appear as Vault references
//! (`--write-secrets` stores them there), never as values. Machines left out are named on
//! stderr.

use std::path::PathBuf;

use super::world::{FleetArgs, SecretArgs, load_fleet, open_secrets};
use super::{CliError, Exit};
use crate::manifest::maas_import::{self, ImportOptions, default_credentials};
use crate::observe::MaasClients;
use crate::provider::maas::MaasClientOptions;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// The site whose MAAS is read (its URL and API key come from the fleet).
    #[arg(long)]
    pub site: String,
    /// The profile of the imported nodes; default: the site's defaultProfile.
    #[arg(long)]
    pub profile: Option<String>,
    #[arg(long)]
    pub sku: String,
    #[arg(long)]
    pub gpus: u32,
    /// The NodeGroup's name; default: `<site>-imported`.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Write the manifest here instead of stdout (refused if the file exists).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Store the BMC logins that differ from the site's default in the secret store, at the
    /// paths the manifest names.
    #[arg(long)]
    pub write_secrets: bool,
}

pub async fn run(args: Args) -> Result<Exit, CliError> {
    let fleet = load_fleet(&args.fleet)?;
    let site = fleet
        .sites
        .values()
        .find(|s| s.name.as_str() == args.site)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = fleet.sites.values().map(|s| s.name.as_str()).collect();
            CliError::user(format!("site `{}` is not in the fleet", args.site))
                .hint(format!("pass --site with one of: {}", known.join(", ")))
        })?;
    let profile = match args
        .profile
        .clone()
        .or(site.default_profile.as_ref().map(|p| p.to_string()))
    {
        Some(profile) => profile,
        None => {
            return Err(CliError::user(format!(
                "site {} has no defaultProfile: name the imported nodes' profile",
                site.name
            ))
            .hint("pass --profile NAME"));
        }
    };
    if let Some(out) = &args.out
        && out.exists()
    {
        return Err(
            CliError::user(format!("`{}` already exists", out.display()))
                .hint("choose another --out file, or move the existing one away"),
        );
    }
    let secrets = open_secrets(&args.secrets)?;
    let clients = MaasClients::new(MaasClientOptions::default());
    let maas = clients
        .client(&site, secrets.as_ref())
        .await
        .map_err(|err| {
            let hint = err.hint();
            let error = CliError::user(err.to_string());
            match hint {
                Some(hint) => error.hint(hint),
                None => error,
            }
        })?;
    let options = ImportOptions::for_site(
        &site,
        &maas,
        profile,
        args.sku.clone(),
        args.gpus,
        args.group.clone(),
    );
    let report = maas_import::import(
        &maas,
        secrets.as_ref(),
        &default_credentials(&site),
        &options,
        args.write_secrets,
    )
    .await
    .map_err(|err| {
        CliError::user(format!(
            "nothing was imported from site {}: {err}",
            site.name
        ))
        .hint("the site's MAAS API key must belong to a MAAS admin (power parameters are read)")
    })?;
    for skipped in &report.skipped {
        eprintln!(
            "skipped {} ({}): {}",
            skipped.hostname, skipped.system_id, skipped.reason
        );
    }
    for path in &report.secrets_written {
        eprintln!("stored the BMC login at {path}");
    }
    match &args.out {
        Some(out) => {
            std::fs::write(out, &report.manifest).map_err(|err| {
                CliError::user(format!("cannot write `{}`: {err}", out.display()))
            })?;
            eprintln!(
                "wrote {} node(s) of site {} to {}",
                report.nodes.len(),
                site.name,
                out.display()
            );
        }
        None => print!("{}", report.manifest),
    }
    Ok(Exit::Success)
}
