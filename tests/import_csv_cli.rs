//! `metalform import-csv`: a header-driven CSV becomes a NodeGroup that validates in a real
//! fleet; positional CSV, duplicate hostnames and bad addresses are refused with their CSV line
//! numbers (seed 000 §4.1), and nothing reaches stdout then.

use crate::manifest_support;

use manifest_support::{GitRepo, metalform, repo_root, stderr, stdout};

const ARGS: [&str; 8] = [
    "--site",
    "dc1",
    "--profile",
    "gpu-default",
    "--sku",
    "mi300x.192g.8gpu",
    "--gpus",
    "8",
];

fn import(repo: &GitRepo, file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["import-csv", file];
    args.extend_from_slice(&ARGS);
    args.extend_from_slice(extra);
    metalform(repo.path(), &args)
}

#[test]
fn a_header_driven_csv_becomes_a_node_group_that_validates() {
    let repo = GitRepo::new();
    repo.copy_dir(&repo_root().join("fleet"), "fleet");
    repo.write(
        "rack-c09.csv",
        "hostname,ipmi_ip,pxe_mac,roce.enp28s0np0,roce.enp29s0np0\n\
         c09u01,10.176.17.1,3c:ec:ef:09:00:01,172.30.11.1/31,172.29.3.1/31\n\
         c09u02,10.176.17.2,,172.30.11.3/31,172.29.3.3/31\n\
         c09u03,10.176.17.3,,,\n",
    );
    let output = import(&repo, "rack-c09.csv", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let yaml = stdout(&output);
    assert!(
        yaml.contains("metadata:\n  name: rack-c09\n"),
        "the name comes from the file: {yaml}"
    );
    assert!(
        yaml.contains("    - {hostname: c09u03, bmc: {ipmiIp: 10.176.17.3}}\n"),
        "{yaml}"
    );

    repo.write("fleet/nodes/dc1/rack-c09.yaml", &yaml);
    let validated = metalform(
        repo.path(),
        &["validate", "--fleet", "fleet", "--format", "json"],
    );
    assert_eq!(validated.status.code(), Some(0), "{}", stdout(&validated));
    let json: serde_json::Value = serde_json::from_str(&stdout(&validated)).unwrap();
    assert_eq!(json["counts"]["nodes"], 42);

    let named = import(&repo, "rack-c09.csv", &["--name", "c09-batch-2"]);
    assert!(stdout(&named).contains("  name: c09-batch-2\n"));
}

#[test]
fn positional_csv_is_refused_with_its_line() {
    let repo = GitRepo::new();
    repo.write("legacy.csv", "c09u01,10.176.17.1\nc09u02,10.176.17.2\n");
    let output = import(&repo, "legacy.csv", &[]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    assert_eq!(
        stderr(&output),
        "legacy.csv:1: error: the first line holds data, not a header: positional CSV is not supported; add a header line such as `hostname,ipmi_ip`\n\
         error: 1 problem(s) in `legacy.csv`; no NodeGroup was written\n\
         hint: the CSV needs a header line `hostname,ipmi_ip` (optional columns: pxe_mac, roce.<interface>)\n"
    );
}

#[test]
fn duplicates_and_bad_addresses_are_reported_with_csv_line_numbers() {
    let repo = GitRepo::new();
    repo.write(
        "rack.csv",
        "# rack C09, second batch\n\
         hostname,ipmi_ip,roce.enp28s0np0\n\
         c09u01,10.176.17.1,172.30.11.1/31\n\
         c09u02,10.176.17.2.5,172.30.11.3/31\n\
         c09u01,10.176.17.3,172.30.11.5\n\
         c09u04,10.176.17.1,172.30.11.1/31\n\
         c09u05,10.176.17.5\n",
    );
    let output = import(&repo, "rack.csv", &[]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    let err = stderr(&output);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[..7],
        [
            "rack.csv:4: error: ipmi_ip `10.176.17.2.5` is not an IPv4 address",
            "rack.csv:5: error: roce.enp28s0np0: `172.30.11.5` is not an IPv4 address with a prefix such as 172.30.9.61/31",
            "rack.csv:5: error: duplicate hostname `c09u01` (first on line 3)",
            "rack.csv:6: error: duplicate ipmi_ip 10.176.17.1 (first on line 3)",
            "rack.csv:6: error: duplicate RoCE address 172.30.11.1 on roce.enp28s0np0 (first on line 3)",
            "rack.csv:7: error: expected 3 fields (as in the header), found 2",
            "error: 6 problem(s) in `rack.csv`; no NodeGroup was written",
        ]
    );
}

#[test]
fn bad_command_line_values_name_their_flag() {
    let repo = GitRepo::new();
    repo.write("rack.csv", "hostname,ipmi_ip\nc09u01,10.176.17.1\n");
    let output = metalform(
        repo.path(),
        &[
            "import-csv",
            "rack.csv",
            "--site",
            "DC1",
            "--profile",
            "gpu-default",
            "--sku",
            "mi300x",
            "--gpus",
            "80",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.starts_with(
        "rack.csv: error: --site: `DC1` is not valid: expected a name of lowercase letters, digits and '-', 1–63 characters, starting and ending with a letter or digit\n\
         rack.csv: error: --gpus: `80` is greater than the maximum 64: expected a GPU count, 0–64\n"
    ), "{err}");
}
