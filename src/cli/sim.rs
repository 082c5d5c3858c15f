//! `metalform sim` (DESIGN.md §3, §5): run the embedded MAAS simulator until interrupted.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::sim::{self, FleetOptions, InitialState, SimConfig};

use super::{CliError, Exit};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:5240", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The admin API key `consumer:token:secret` (default: a fixed development key).
    #[arg(
        long,
        env = "METALFORM_SIM_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Start with N generated GPU machines.
    #[arg(long, value_name = "N", conflicts_with = "from", default_value_t = 10)]
    pub machines: usize,
    /// State the generated machines start in: ready, new, allocated, deployed, broken,
    /// failed_commissioning, or unknown (they appear only through PXE discovery).
    #[arg(long, value_name = "STATE", default_value = "ready")]
    pub machine_state: String,
    /// Additional BMCs MAAS does not know (power-cycle them with PXE boot to enlist them).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub unknown: usize,
    /// Every N-th generated machine has no BOSS/M.2 boot disk (0 = all have one).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub no_boss_every: usize,
    /// Load a real MAAS machines export (the JSON of GET /MAAS/api/2.0/machines/).
    #[arg(long, value_name = "EXPORT.json")]
    pub from: Option<PathBuf>,
    /// Simulated seconds per real second (MAAS durations are divided by it).
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    pub time_scale: f64,
    /// Spread of MAAS's durations: each is drawn within ±X of its nominal value (0 to 0.9;
    /// 0 makes every deployment take exactly as long).
    #[arg(long, default_value_t = 0.2, value_name = "X")]
    pub jitter: f64,
    /// Serve N separate regions (sites), each with its own machines (`--machines` each, seed
    /// `--seed` + i) on consecutive ports from `--listen` (each on a free port when it is 0).
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "from")]
    pub regions: usize,
    /// Fault spec (docs/simulator.md "Faults"), e.g. `deploy:status=503,retry_after=5,rate=0.2`.
    #[arg(long, default_value = "", value_name = "SPEC")]
    pub faults: String,
    /// Seed of every random draw.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Also serve N simulated Redfish BMCs, each on its own port (docs/redfish.md).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub redfish_bmcs: usize,
    /// Vendor of the Redfish BMCs: dell, hpe, lenovo, supermicro, generic, or mixed (each in turn).
    #[arg(long, value_name = "VENDOR", default_value = "mixed")]
    pub redfish_vendor: String,
    /// Controller base URL the simulated maintenance OS posts its status webhook to; the
    /// shared secret comes from METALFORM_WEBHOOK_SECRET.
    #[arg(long, value_name = "URL")]
    pub redfish_webhook: Option<url::Url>,
    /// Fault rules for every Redfish BMC (docs/redfish.md), e.g. `insert:status=503,count=2`.
    #[arg(long, default_value = "", value_name = "SPEC")]
    pub redfish_faults: String,
}

/// The simulated Redfish BMCs the flags describe (none without --redfish-bmcs).
pub fn redfish_config(args: &Args) -> Result<sim::redfish::RedfishSimConfig, CliError> {
    use crate::provider::redfish::profile::Vendor;
    let vendor = match args.redfish_vendor.as_str() {
        "mixed" => None,
        text => Some(Vendor::parse(text).ok_or_else(|| {
            CliError::argument(format!("unknown --redfish-vendor `{text}`"))
                .hint("use one of: dell, hpe, lenovo, supermicro, generic, mixed")
        })?),
    };
    let faults = sim::redfish::FaultRule::parse(&args.redfish_faults).map_err(|e| {
        CliError::argument(format!("--redfish-faults: {e}"))
            .hint("see docs/redfish.md for the fault grammar")
    })?;
    let mut config = sim::redfish::RedfishSimConfig::generated(args.redfish_bmcs, vendor);
    for bmc in &mut config.bmcs {
        bmc.faults = faults.clone();
    }
    config.time_scale = args.time_scale;
    config.listen = args.listen.ip();
    if let Some(base) = &args.redfish_webhook {
        let secret = std::env::var("METALFORM_WEBHOOK_SECRET").map_err(|_| {
            CliError::argument(
                "--redfish-webhook needs the shared secret in METALFORM_WEBHOOK_SECRET",
            )
            .hint("export METALFORM_WEBHOOK_SECRET with the controller's webhook secret")
        })?;
        config.webhook = Some(sim::redfish::WebhookTarget {
            base: base.clone(),
            secret: crate::secrets::Secret::new(secret),
        });
    }
    Ok(config)
}

/// Builds the simulator configuration the flags describe.
pub fn config(args: &Args) -> Result<SimConfig, CliError> {
    let initial = InitialState::parse(&args.machine_state).ok_or_else(|| {
        CliError::argument(format!("unknown --machine-state `{}`", args.machine_state)).hint(
            "use one of: ready, new, allocated, deployed, broken, failed_commissioning, unknown",
        )
    })?;
    let mut config = match &args.from {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::user(format!("cannot read {}: {e}", path.display()))
                    .hint("pass the JSON saved from `maas $PROFILE machines read`")
            })?;
            let mut config = SimConfig {
                seed: args.seed,
                ..SimConfig::default()
            };
            let summary = sim::export::load_export(&mut config, &text).map_err(|e| {
                CliError::user(format!("{}: {e}", path.display())).hint(
                    "the file must be the JSON array MAAS returns for GET /MAAS/api/2.0/machines/",
                )
            })?;
            eprintln!(
                "loaded {} machines from {}",
                summary.machines,
                path.display()
            );
            for note in summary.approximations {
                eprintln!("note: {note}");
            }
            config
        }
        None => SimConfig::generated(args.seed, &fleet_options(args, initial)),
    };
    if let Some(key) = &args.api_key {
        config.api_key = key.clone();
    }
    if args.regions == 0 {
        return Err(CliError::argument("--regions must be at least 1")
            .hint("pass the number of simulated sites to serve, e.g. --regions 4"));
    }
    if !(0.0..=0.9).contains(&args.jitter) {
        return Err(
            CliError::argument(format!("--jitter {} is out of range", args.jitter))
                .hint("use a fraction from 0 (none) to 0.9"),
        );
    }
    config.time_scale = args.time_scale;
    config.timings.jitter = args.jitter;
    config.faults = args.faults.clone();
    Ok(config)
}

/// The generated machines the flags ask for.
fn fleet_options(args: &Args, initial: InitialState) -> FleetOptions {
    FleetOptions {
        machines: args.machines,
        initial,
        no_boss_every: args.no_boss_every,
        unknown: args.unknown,
    }
}

/// The address region `index` of `--regions` listens on.
fn region_listen(listen: SocketAddr, index: usize) -> Result<SocketAddr, CliError> {
    if listen.port() == 0 {
        return Ok(listen);
    }
    let port = u16::try_from(usize::from(listen.port()) + index).map_err(|_| {
        CliError::argument(format!("--regions {} runs past port 65535", index + 1))
            .hint("choose a lower --listen port")
    })?;
    Ok(SocketAddr::new(listen.ip(), port))
}

pub async fn run(args: Args) -> Result<Exit, CliError> {
    let config = config(&args)?;
    let redfish = redfish_config(&args)?;
    let mut handles = Vec::new();
    for index in 0..args.regions {
        let mut config = config.clone();
        if index > 0 {
            // Each region its own machines: another seed draws other system ids and MACs.
            let seed = args.seed.wrapping_add(index as u64);
            // Parsed (and refused when unknown) by `config` above.
            let initial = InitialState::parse(&args.machine_state).unwrap_or(InitialState::Ready);
            let options = fleet_options(&args, initial);
            config.machines = SimConfig::generated(seed, &options).machines;
            config.seed = seed;
        }
        let handle = sim::start_with_clock(
            config,
            std::sync::Arc::new(crate::clock::SystemClock),
            region_listen(args.listen, index)?,
        )
        .await
        .map_err(|e| {
            let hint = match &e {
                sim::SimError::Listen { .. } => {
                    "choose a free address with --listen 127.0.0.1:PORT"
                }
                sim::SimError::Config(_) => {
                    "see docs/simulator.md for the fault grammar and options"
                }
                sim::SimError::Http(_) => "this is a bug; please report it",
            };
            CliError::user(e.to_string()).hint(hint)
        })?;
        if args.regions > 1 {
            println!("region {}:", index + 1);
        }
        // The key is printed on purpose: it is the simulator's own development credential.
        println!("MAAS URL: {}", handle.maas_url);
        println!("API key:  {}", handle.api_key().expose());
        println!("control:  {}/sim/v1/", handle.base_url());
        handles.push(handle);
    }
    let bmcs = sim::redfish::start(redfish).await.map_err(|e| {
        CliError::user(e.to_string()).hint("choose a free address with --listen 127.0.0.1:PORT")
    })?;
    for bmc in &bmcs.bmcs {
        // The login is printed on purpose: it is the simulator's own development credential.
        println!(
            "Redfish BMC {} ({}): {}/redfish/v1/ (login {} / {})",
            bmc.serial,
            bmc.vendor,
            bmc.url,
            sim::redfish::DEFAULT_USER,
            sim::redfish::DEFAULT_PASSWORD
        );
    }
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| CliError::unexpected(format!("cannot wait for Ctrl-C: {e}")))?;
    for handle in handles {
        handle.shutdown();
    }
    bmcs.shutdown();
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn flags_build_the_configuration() {
        let w = Wrapper::parse_from([
            "sim",
            "--machines",
            "3",
            "--unknown",
            "2",
            "--machine-state",
            "new",
            "--seed",
            "4",
            "--time-scale",
            "60",
            "--faults",
            "deploy:status=503",
        ]);
        let c = config(&w.args).unwrap();
        assert_eq!(c.machines.len(), 5);
        assert_eq!(c.machines[0].initial, InitialState::New);
        assert_eq!(c.machines[4].initial, InitialState::Unknown);
        assert_eq!(c.time_scale, 60.0);
        assert_eq!(c.seed, 4);
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("export.json");
        std::fs::write(
            &export,
            r#"[{"system_id": "abc123", "hostname": "c07u43", "status": 6,
                 "interface_set": [{"type": "physical", "name": "eno8303", "mac_address": "AA:BB:CC:00:00:01"}],
                 "physicalblockdevice_set": [{"name": "sda", "model": "Dell BOSS-N1", "size": 480000000000}]}]"#,
        )
        .unwrap();
        let from = Wrapper::parse_from(["sim", "--from", export.to_str().unwrap()]);
        let c = config(&from.args).unwrap();
        assert_eq!(c.machines.len(), 1);
        assert_eq!(c.machines[0].system_id.as_deref(), Some("abc123"));
        assert_eq!(c.machines[0].initial, InitialState::Deployed);
        assert_eq!(c.machines[0].interfaces[0].mac, "aa:bb:cc:00:00:01");
        std::fs::write(&export, "{\"not\": \"machines\"}").unwrap();
        let err = config(&from.args).unwrap_err();
        assert!(err.message.ends_with("expected a JSON array of machine objects (the output of GET /MAAS/api/2.0/machines/)"), "{}", err.message);
        let missing = Wrapper::parse_from(["sim", "--from", "/nonexistent/export.json"]);
        assert!(
            config(&missing.args)
                .unwrap_err()
                .message
                .starts_with("cannot read /nonexistent/export.json")
        );
        let redfish = Wrapper::parse_from([
            "sim",
            "--redfish-bmcs",
            "6",
            "--redfish-faults",
            "insert:status=503,count=1",
        ]);
        let r = redfish_config(&redfish.args).unwrap();
        let vendors: Vec<&str> = r.bmcs.iter().map(|b| b.vendor.as_str()).collect();
        assert_eq!(
            vendors,
            ["dell", "hpe", "lenovo", "supermicro", "generic", "dell"]
        );
        assert_eq!(r.bmcs[5].serial, "RF-0006");
        assert_eq!(r.bmcs[0].faults.len(), 1);
        let bad_vendor =
            Wrapper::parse_from(["sim", "--redfish-bmcs", "1", "--redfish-vendor", "acme"]);
        assert_eq!(
            redfish_config(&bad_vendor.args).unwrap_err().message,
            "unknown --redfish-vendor `acme`"
        );
        let exact = Wrapper::parse_from(["sim", "--jitter", "0", "--regions", "3"]);
        assert_eq!(config(&exact.args).unwrap().timings.jitter, 0.0);
        let wild = Wrapper::parse_from(["sim", "--jitter", "1.5"]);
        let err = config(&wild.args).unwrap_err();
        assert_eq!(err.message, "--jitter 1.5 is out of range");
        assert_eq!(err.class.exit_code(), 2);
        let none = Wrapper::parse_from(["sim", "--regions", "0"]);
        assert_eq!(
            config(&none.args).unwrap_err().message,
            "--regions must be at least 1"
        );
        let listen: SocketAddr = "127.0.0.1:65535".parse().unwrap();
        assert_eq!(region_listen(listen, 0).unwrap(), listen);
        assert_eq!(
            region_listen(listen, 1).unwrap_err().message,
            "--regions 2 runs past port 65535"
        );
        let free: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(region_listen(free, 5).unwrap(), free);
        let bad = Wrapper::parse_from(["sim", "--machine-state", "sleepy"]);
        let err = config(&bad.args).unwrap_err();
        assert_eq!(err.message, "unknown --machine-state `sleepy`");
        assert_eq!(err.class.exit_code(), 2);
    }
}
