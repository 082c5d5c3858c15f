//! CSV import (seed 000 §4.1: "Header-driven import should be the only supported CSV mode ...
//! Legacy positional CSV parsing is a script convenience, not part of the contract"): a CSV of
//! nodes with a header line becomes a NodeGroup manifest.
//!
//! Columns: `hostname` and `ipmi_ip` (required), `pxe_mac` and `roce.<interface>` (optional,
//! may be empty per row). Every problem is reported with its CSV line. The generated document
//! is checked against the NodeGroup schema before it is returned, so what this prints is a
//! manifest `validate` accepts as far as one document can be checked alone.

use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;

use super::schema::{self, Kind};
use super::suggest::did_you_mean;
use super::tree::{PathSegment, display_path};
use super::yaml;
use crate::model::{InterfaceAddr, MacAddr};

/// The group-level values of the NodeGroup (from the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTemplate {
    pub name: String,
    pub site: String,
    pub profile: String,
    pub sku: String,
    pub gpus: u32,
    /// Where the rows came from, for the generated file's header comment.
    pub source: String,
}

/// One problem: on a CSV line, or with a command-line value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvProblem {
    pub at: ProblemAt,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemAt {
    Line(u64),
    /// A command-line flag such as `--site`.
    Flag(&'static str),
}

/// `LINE: error: message` (the caller prefixes the file name), or `: error: --flag: message`.
impl fmt::Display for CsvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            ProblemAt::Line(line) => write!(f, "{line}: error: {}", self.message),
            ProblemAt::Flag(flag) => write!(f, " error: {flag}: {}", self.message),
        }
    }
}

/// A NodeGroup name from a file name: lowercase, other characters turned into `-`.
pub fn group_name_from_file(stem: &str) -> String {
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_matches('-').to_string();
    name.truncate(63);
    let name = name.trim_end_matches('-');
    if name.is_empty() {
        "imported".into()
    } else {
        name.into()
    }
}

const KNOWN_COLUMNS: [&str; 4] = ["hostname", "ipmi_ip", "pxe_mac", "roce.<interface>"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Hostname,
    IpmiIp,
    PxeMac,
    Roce(usize),
}

struct Row {
    line: u64,
    hostname: String,
    ipmi_ip: Ipv4Addr,
    pxe_mac: Option<MacAddr>,
    roce: Vec<(String, InterfaceAddr)>,
}

/// Convert CSV text into NodeGroup YAML, or every problem found.
pub fn import(text: &str, template: &GroupTemplate) -> Result<String, Vec<CsvProblem>> {
    let mut problems = Vec::new();
    let mut problem = |line: u64, message: String| {
        problems.push(CsvProblem {
            at: ProblemAt::Line(line),
            message,
        })
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());

    let mut columns: Option<(Vec<Column>, Vec<String>)> = None;
    let mut rows = Vec::new();
    let mut hostnames: HashMap<String, u64> = HashMap::new();
    let mut bmcs: HashMap<Ipv4Addr, u64> = HashMap::new();
    let mut macs: HashMap<MacAddr, u64> = HashMap::new();
    let mut roce_addresses: HashMap<Ipv4Addr, u64> = HashMap::new();
    for record in reader.records() {
        let record = match record {
            Ok(record) => record,
            Err(err) => {
                let line = err.position().map_or(0, |p| p.line());
                problem(line, format!("not valid CSV: {err}"));
                continue;
            }
        };
        let line = record.position().map_or(0, |p| p.line());
        if record.iter().all(str::is_empty) {
            continue;
        }
        let Some((layout, roce_ifaces)) = &columns else {
            match header(&record, line) {
                Ok(parsed) => columns = Some(parsed),
                Err(mut header_problems) => {
                    problems.append(&mut header_problems);
                    return Err(problems);
                }
            }
            continue;
        };
        if record.len() != layout.len() {
            problem(
                line,
                format!(
                    "expected {} fields (as in the header), found {}",
                    layout.len(),
                    record.len()
                ),
            );
            continue;
        }
        let mut hostname = String::new();
        let mut ipmi_ip = None;
        let mut pxe_mac = None;
        let mut roce = Vec::new();
        let mut row_ok = true;
        for (column, value) in layout.iter().zip(record.iter()) {
            match column {
                Column::Hostname => hostname = value.to_string(),
                Column::IpmiIp => match value.parse::<Ipv4Addr>() {
                    Ok(ip) => ipmi_ip = Some(ip),
                    Err(_) => {
                        problem(line, format!("ipmi_ip `{value}` is not an IPv4 address"));
                        row_ok = false;
                    }
                },
                Column::PxeMac if value.is_empty() => {}
                Column::PxeMac => match value.parse::<MacAddr>() {
                    Ok(mac) => pxe_mac = Some(mac),
                    Err(err) => {
                        problem(line, format!("pxe_mac: {err}"));
                        row_ok = false;
                    }
                },
                Column::Roce(_) if value.is_empty() => {}
                Column::Roce(i) => match value.parse::<InterfaceAddr>() {
                    Ok(address) => roce.push((roce_ifaces[*i].clone(), address)),
                    Err(err) => {
                        problem(line, format!("roce.{}: {err}", roce_ifaces[*i]));
                        row_ok = false;
                    }
                },
            }
        }
        if hostname.is_empty() {
            problem(line, "hostname is empty".into());
            continue;
        }
        if let Some(first) = hostnames.get(&hostname) {
            problem(
                line,
                format!("duplicate hostname `{hostname}` (first on line {first})"),
            );
            row_ok = false;
        } else {
            hostnames.insert(hostname.clone(), line);
        }
        if let Some(ip) = ipmi_ip {
            if let Some(first) = bmcs.get(&ip) {
                problem(
                    line,
                    format!("duplicate ipmi_ip {ip} (first on line {first})"),
                );
                row_ok = false;
            } else {
                bmcs.insert(ip, line);
            }
        }
        if let Some(mac) = pxe_mac {
            if let Some(first) = macs.get(&mac) {
                problem(
                    line,
                    format!("duplicate pxe_mac {mac} (first on line {first})"),
                );
                row_ok = false;
            } else {
                macs.insert(mac, line);
            }
        }
        for (iface, address) in &roce {
            if let Some(first) = roce_addresses.get(&address.address) {
                problem(
                    line,
                    format!(
                        "duplicate RoCE address {} on roce.{iface} (first on line {first})",
                        address.address
                    ),
                );
                row_ok = false;
            } else {
                roce_addresses.insert(address.address, line);
            }
        }
        if let (true, Some(ipmi_ip)) = (row_ok, ipmi_ip) {
            rows.push(Row {
                line,
                hostname,
                ipmi_ip,
                pxe_mac,
                roce,
            });
        }
    }
    if columns.is_none() {
        problems.push(CsvProblem {
            at: ProblemAt::Line(1),
            message: "the file has no header line and no rows".into(),
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let yaml = render(&rows, template);
    check_against_schema(&yaml, &rows, template)?;
    Ok(yaml)
}

/// Read the header: which column is what. Refuses positional CSV (no header) outright.
fn header(
    record: &csv::StringRecord,
    line: u64,
) -> Result<(Vec<Column>, Vec<String>), Vec<CsvProblem>> {
    let problem = |message: String| CsvProblem {
        at: ProblemAt::Line(line),
        message,
    };
    if record.iter().any(|cell| cell.parse::<Ipv4Addr>().is_ok()) {
        return Err(vec![problem(
            "the first line holds data, not a header: positional CSV is not supported; add a header line such as `hostname,ipmi_ip`".into(),
        )]);
    }
    let mut problems = Vec::new();
    let mut layout = Vec::new();
    let mut roce_ifaces = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, cell) in record.iter().enumerate() {
        let name = cell.to_ascii_lowercase();
        if seen.insert(name.clone(), i).is_some() {
            problems.push(problem(format!("column `{cell}` appears twice")));
            continue;
        }
        let column = match name.as_str() {
            "hostname" => Column::Hostname,
            "ipmi_ip" => Column::IpmiIp,
            "pxe_mac" => Column::PxeMac,
            _ => match cell.strip_prefix("roce.") {
                Some(iface) if !iface.is_empty() => {
                    roce_ifaces.push(iface.to_string());
                    Column::Roce(roce_ifaces.len() - 1)
                }
                _ => {
                    let hint = did_you_mean(&name, ["hostname", "ipmi_ip", "pxe_mac"])
                        .map(|b| format!("did you mean `{b}`?"))
                        .unwrap_or_else(|| format!("known columns: {}", KNOWN_COLUMNS.join(", ")));
                    problems.push(problem(format!("unknown column `{cell}`: {hint}")));
                    continue;
                }
            },
        };
        layout.push(column);
    }
    for (required, column) in [("hostname", Column::Hostname), ("ipmi_ip", Column::IpmiIp)] {
        if !layout.contains(&column) && !seen.keys().any(|k| did_you_mean(k, [required]).is_some())
        {
            problems.push(problem(format!("the header has no `{required}` column")));
        }
    }
    if problems.is_empty() {
        Ok((layout, roce_ifaces))
    } else {
        Err(problems)
    }
}

/// A YAML scalar: plain when it is obviously safe, JSON-quoted (valid YAML) otherwise.
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        && !matches!(
            text,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_string()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

fn render(rows: &[Row], template: &GroupTemplate) -> String {
    let mut out = format!(
        "# Generated by `metalform import-csv` from {} ({} node(s)).\n",
        template.source.replace('\n', " "),
        rows.len()
    );
    out.push_str("apiVersion: metalform/v1\nkind: NodeGroup\nmetadata:\n");
    out.push_str(&format!("  name: {}\nspec:\n", scalar(&template.name)));
    out.push_str(&format!("  site: {}\n", scalar(&template.site)));
    out.push_str(&format!("  profile: {}\n", scalar(&template.profile)));
    out.push_str(&format!("  sku: {}\n", scalar(&template.sku)));
    out.push_str(&format!("  gpus: {}\n", template.gpus));
    if rows.is_empty() {
        out.push_str("  nodes: []\n");
        return out;
    }
    out.push_str("  nodes:\n");
    for row in rows {
        out.push_str(&format!(
            "    - {{hostname: {}, bmc: {{ipmiIp: {}}}",
            scalar(&row.hostname),
            row.ipmi_ip
        ));
        if let Some(mac) = row.pxe_mac {
            out.push_str(&format!(", pxeMac: {}", scalar(&mac.to_string())));
        }
        if !row.roce.is_empty() {
            let items: Vec<String> = row
                .roce
                .iter()
                .map(|(iface, address)| {
                    format!("{{interface: {}, address: {address}}}", scalar(iface))
                })
                .collect();
            out.push_str(&format!(", roce: [{}]", items.join(", ")));
        }
        out.push_str("}\n");
    }
    out
}

/// Run the generated document through the NodeGroup schema; map what it finds back to CSV
/// lines (members) or to the command-line flag that supplied the value.
fn check_against_schema(
    yaml: &str,
    rows: &[Row],
    template: &GroupTemplate,
) -> Result<(), Vec<CsvProblem>> {
    let docs = yaml::parse(yaml).map_err(|err| {
        vec![CsvProblem {
            at: ProblemAt::Flag("--name"),
            message: format!(
                "the generated YAML does not parse ({}); this is a bug",
                err.message
            ),
        }]
    })?;
    let Some(doc) = docs.first() else {
        return Ok(());
    };
    let findings = schema::validate(Kind::NodeGroup, &doc.to_json());
    let problems: Vec<CsvProblem> = findings
        .into_iter()
        .map(|f| {
            let at = match f.path.as_slice() {
                [
                    PathSegment::Key(spec),
                    PathSegment::Key(nodes),
                    PathSegment::Index(i),
                    ..,
                ] if spec == "spec" && nodes == "nodes" => {
                    ProblemAt::Line(rows.get(*i).map_or(0, |r| r.line))
                }
                [PathSegment::Key(meta), ..] if meta == "metadata" => ProblemAt::Flag("--name"),
                [_, PathSegment::Key(field), ..] => match field.as_ref() {
                    "site" => ProblemAt::Flag("--site"),
                    "profile" => ProblemAt::Flag("--profile"),
                    "sku" => ProblemAt::Flag("--sku"),
                    _ => ProblemAt::Flag("--gpus"),
                },
                _ => ProblemAt::Flag("--name"),
            };
            let field = f
                .path
                .last()
                .map(|_| display_path(&f.path))
                .unwrap_or_default();
            let column = match &at {
                ProblemAt::Line(_) => match field.rsplit('.').next() {
                    Some("hostname") => "hostname: ".to_string(),
                    Some(other) => format!("{other}: "),
                    None => String::new(),
                },
                ProblemAt::Flag(_) => String::new(),
            };
            let value = match &at {
                ProblemAt::Flag("--name") => format!(" (`{}`)", template.name),
                _ => String::new(),
            };
            CsvProblem {
                at,
                message: format!("{column}{}{value}", f.message),
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> GroupTemplate {
        GroupTemplate {
            name: "rack-c09".into(),
            site: "dc1".into(),
            profile: "gpu-default".into(),
            sku: "mi300x.192g.8gpu".into(),
            gpus: 8,
            source: "rack-c09.csv".into(),
        }
    }

    #[test]
    fn header_driven_csv_becomes_a_node_group() {
        let csv = "hostname,ipmi_ip,pxe_mac,roce.enp28s0np0\n\
                   c09u01,10.176.17.1,3C:EC:EF:00:00:01,172.30.11.1/31\n\
                   \n\
                   # spare slot\n\
                   c09u02,10.176.17.2,,\n";
        let yaml = import(csv, &template()).unwrap();
        assert_eq!(
            yaml,
            "# Generated by `metalform import-csv` from rack-c09.csv (2 node(s)).\n\
             apiVersion: metalform/v1\nkind: NodeGroup\nmetadata:\n  name: rack-c09\nspec:\n  site: dc1\n  profile: gpu-default\n  sku: mi300x.192g.8gpu\n  gpus: 8\n  nodes:\n\
             \x20   - {hostname: c09u01, bmc: {ipmiIp: 10.176.17.1}, pxeMac: \"3c:ec:ef:00:00:01\", roce: [{interface: enp28s0np0, address: 172.30.11.1/31}]}\n\
             \x20   - {hostname: c09u02, bmc: {ipmiIp: 10.176.17.2}}\n"
        );
    }

    #[test]
    fn positional_csv_is_refused() {
        let problems = import("c09u01,10.176.17.1\nc09u02,10.176.17.2\n", &template()).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].to_string(),
            "1: error: the first line holds data, not a header: positional CSV is not supported; add a header line such as `hostname,ipmi_ip`"
        );
    }

    #[test]
    fn bad_rows_are_reported_with_their_lines() {
        let csv = "hostname,ipmi_ip\nc09u01,10.176.17.1\nc09u02,10.176.17.300\nc09u01,10.176.17.3\nC09U04,10.176.17.1\n";
        let problems: Vec<String> = import(csv, &template())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "3: error: ipmi_ip `10.176.17.300` is not an IPv4 address",
                "4: error: duplicate hostname `c09u01` (first on line 2)",
                "5: error: duplicate ipmi_ip 10.176.17.1 (first on line 2)",
            ]
        );
        let problems: Vec<String> = import("hostname,ipmi_ip\nC09U04,10.176.17.4\n", &template())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "2: error: hostname: `C09U04` is not valid: expected a hostname of lowercase letters, digits and '-', 1–63 characters, starting and ending with a letter or digit"
            ]
        );
    }

    #[test]
    fn header_problems_and_flags() {
        let problems: Vec<String> = import("host,ipmi-ip\n", &template())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "1: error: unknown column `host`: did you mean `hostname`?",
                "1: error: unknown column `ipmi-ip`: did you mean `ipmi_ip`?",
            ]
        );
        let bad_sku = GroupTemplate {
            sku: "MI300X".into(),
            ..template()
        };
        let problems: Vec<String> = import("hostname,ipmi_ip\na,10.0.0.1\n", &bad_sku)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                " error: --sku: `MI300X` is not valid: expected a SKU id of lowercase letters, digits, '.', '_' and '-', such as mi300x.192g.8gpu"
            ]
        );
        assert_eq!(group_name_from_file("Rack_C09 (new)"), "rack-c09--new");
    }
}
