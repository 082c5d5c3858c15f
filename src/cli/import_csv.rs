//! `metalform import-csv FILE --site S --profile P --sku K --gpus N [--name GROUP]` (seed 000
//! §4.1 CSV rule): a header-driven CSV of nodes becomes a NodeGroup manifest on stdout. Problems
//! are reported as FILE:LINE with the CSV line, and nothing is printed to stdout then.

use std::path::PathBuf;

use super::{CliError, Exit};
use crate::manifest::csv_import::{self, GroupTemplate};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The CSV file: a header line `hostname,ipmi_ip` (plus optional `pxe_mac`, `roce.<iface>`).
    pub file: PathBuf,
    #[arg(long)]
    pub site: String,
    #[arg(long)]
    pub profile: String,
    #[arg(long)]
    pub sku: String,
    #[arg(long)]
    pub gpus: u32,
    /// The NodeGroup's name; default: the file name without extension.
    #[arg(long, value_name = "GROUP")]
    pub name: Option<String>,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let shown = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|err| CliError::user(format!("cannot read `{shown}`: {err}")))?;
    let name = args.name.clone().unwrap_or_else(|| {
        csv_import::group_name_from_file(
            &args.file.file_stem().unwrap_or_default().to_string_lossy(),
        )
    });
    let template = GroupTemplate {
        name,
        site: args.site,
        profile: args.profile,
        sku: args.sku,
        gpus: args.gpus,
        source: shown.clone(),
    };
    match csv_import::import(&text, &template) {
        Ok(yaml) => {
            print!("{yaml}");
            Ok(Exit::Success)
        }
        Err(problems) => {
            for problem in &problems {
                eprintln!("{shown}:{problem}");
            }
            Err(CliError::user(format!("{} problem(s) in `{shown}`; no NodeGroup was written", problems.len()))
                .hint("the CSV needs a header line `hostname,ipmi_ip` (optional columns: pxe_mac, roce.<interface>)"))
        }
    }
}
