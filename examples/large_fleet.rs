//! Generates a large, valid fleet for benchmarks and scale tests (issue 2: 10,000 nodes over
//! 5 sites in 100 NodeGroup files).
//!
//! `cargo run --release --example large_fleet -- OUT_DIR [NODES [SITES [GROUPS]]]`
//! (defaults 10000 5 100). Each site gets a Site and a Profile; nodes are spread evenly over the
//! groups, each with a BMC address and two RoCE /31 assignments unique within its site.

use std::fmt::Write as _;
use std::path::Path;

/// The shape of the generated fleet.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub nodes: usize,
    pub sites: usize,
    pub groups: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            nodes: 10_000,
            sites: 5,
            groups: 100,
        }
    }
}

/// Write the fleet under `dir` (sites/, profiles/, nodes/<site>/). Returns the files written.
pub fn generate(dir: &Path, shape: Shape) -> std::io::Result<usize> {
    assert!(shape.sites > 0 && shape.groups >= shape.sites && shape.nodes >= shape.groups);
    assert!(shape.sites <= 8, "address plan: at most 8 sites");
    let mut files = 0;
    for s in 0..shape.sites {
        let site = format!("site{s}");
        write(
            &dir.join(format!("sites/{site}.yaml")),
            &format!(
                "apiVersion: metalform/v1\nkind: Site\nmetadata: {{name: {site}}}\nspec:\n  region: region-{s}\n  \
                 maas: {{url: \"https://10.{s}.46.1:5443/MAAS\", apiKey: {{vault: kv/maas-sites/{site}/api-token, key: token}}}}\n  \
                 power: {{defaultCredentials: {{vault: kv/maas-sites/{site}/power/default}}}}\n  \
                 network: {{pxeIface: ens19, pxeVlanVid: {vlan}, nodePxeIface: eno8303}}\n  \
                 deploy: {{password: {{vault: kv/maas-sites/{site}/deploy, key: password}}}}\n  defaultProfile: {site}-gpu\n",
                vlan = 40 + s
            ),
        )?;
        write(
            &dir.join(format!("profiles/{site}-gpu.yaml")),
            &format!(
                "apiVersion: metalform/v1\nkind: Profile\nmetadata: {{name: {site}-gpu, site: {site}}}\n\
                 spec:\n  storage: {{dataDisks: initialize}}\n  hardwareSync: {{interval: 15m}}\n  release: {{erase: quick}}\n"
            ),
        )?;
        files += 2;
    }
    // Groups are dealt to sites round-robin; nodes to groups evenly.
    let per_group = shape.nodes / shape.groups;
    let mut site_counters = vec![0usize; shape.sites];
    for g in 0..shape.groups {
        let s = g % shape.sites;
        let site = format!("site{s}");
        let count = per_group + usize::from(g < shape.nodes % shape.groups);
        let mut text = format!(
            "apiVersion: metalform/v1\nkind: NodeGroup\nmetadata: {{name: rack-{g:03}}}\nspec:\n  site: {site}\n  \
             sku: mi300x.192g.8gpu\n  gpus: 8\n  nodes:\n"
        );
        for n in 0..count {
            let i = site_counters[s];
            site_counters[s] += 1;
            let odd = 2 * i + 1;
            let _ = writeln!(
                text,
                "    - {{hostname: r{g:03}n{n:03}, bmc: {{ipmiIp: 10.{b}.{c}.{d}}}, roce: [{{interface: enp28s0np0, address: 172.{r1}.{hi}.{lo}/31}}, {{interface: enp29s0np0, address: 172.{r2}.{hi}.{lo}/31}}]}}",
                b = 16 + s,
                c = i / 250,
                d = i % 250 + 1,
                r1 = 16 + s,
                r2 = 24 + s,
                hi = odd / 256,
                lo = odd % 256,
            );
        }
        write(&dir.join(format!("nodes/{site}/rack-{g:03}.yaml")), &text)?;
        files += 1;
    }
    Ok(files)
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().expect("a parent directory"))?;
    std::fs::write(path, text)
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: large_fleet OUT_DIR [NODES [SITES [GROUPS]]]");
        std::process::exit(64);
    };
    let number = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let shape = Shape {
        nodes: number(1, 10_000),
        sites: number(2, 5),
        groups: number(3, 100),
    };
    match generate(Path::new(out), shape) {
        Ok(files) => eprintln!("wrote {files} files with {} nodes under {out}", shape.nodes),
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(1);
        }
    }
}
