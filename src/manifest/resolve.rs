//! Semantic checks and resolution into the model (DESIGN.md §2 validation list; seed 000 §3.2.1
//! power overrides, §3.3 RoCE, §3.6/§3.7 policy defaults, §4.1 onboarding input; seed 004
//! retirement).
//!
//! Runs on the documents the schema accepted. A document the schema refused is still known by
//! name, so references to it are not reported a second time as "unknown". Checks that span
//! documents (duplicate names, hostnames, BMC and RoCE addresses within a site) report the later
//! definition and name the earlier one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value as Json;

use super::document::{
    DeployUserSpec, NodeDocument, NodeFieldsSpec, NodeGroupDocument, NodeGroupSpec, PowerMatchSpec,
    ProfileDocument, SecretRefSpec, SiteDocument, WindowSpec,
};
use super::schema::{self, Kind};
use super::suggest::did_you_mean;
use super::tree::{PathSegment, Value, field_path};
use super::{Findings, ParsedDocument, Severity};
use crate::model::{
    Bmc, BootDiskMatch, CloudInit, Concurrency, Decommission, DeployIdentity, DeployPassword,
    DeployPolicy, DeployUserPolicy, Discovery, Enrollment, EraseMode, Fleet, GroupName,
    GroupPolicy, HardwareSync, Hostname, Image, InterfaceAddr, Lifecycle, MaasEndpoint, MacAddr,
    MaintenanceWindow, NetworkOverrides, Node, NodeId, Power, PowerOverride, PowerSelector,
    PowerType, Preflight, Profile, ProfileName, ProfileNetwork, Provenance, ReconcilePolicy,
    Reimage, ReleasePolicy, Revision, RoceAssignment, RocePolicy, Schedule, SecretRef, Site,
    SiteBundle, SiteName, SiteNetwork, SiteStatus, Sku, Storage, StorageLayout, SudoPolicy,
    TimeZone, Timeouts, WindowOnboarding, duration,
};

/// A document the schema accepted, as its typed form.
pub(super) enum Typed {
    Site(SiteDocument),
    Profile(ProfileDocument),
    Node(NodeDocument),
    /// The group with only the entries the schema accepted, and their original indices.
    NodeGroup(NodeGroupDocument, Vec<usize>),
}

/// Names declared by documents, valid or not (read straight from the tree).
#[derive(Default)]
struct Declared {
    sites: BTreeSet<String>,
    /// Profile name -> the site it names, if readable.
    profiles: BTreeMap<String, Option<String>>,
    /// Site name -> its defaultProfile, if readable.
    default_profiles: HashMap<String, String>,
}

/// Resolve the classified documents (`typed`: index into `documents`, typed form).
pub(super) fn resolve(
    documents: &[ParsedDocument],
    typed: &[(usize, Typed)],
    revision: Revision,
    findings: &mut Findings,
) -> Option<Fleet> {
    let declared = declared_names(documents);
    let mut resolver = Resolver {
        documents,
        findings,
        declared,
        sites: BTreeMap::new(),
        site_seen: HashMap::new(),
        profiles: BTreeMap::new(),
        profile_seen: HashMap::new(),
        nodes: BTreeMap::new(),
        groups: BTreeMap::new(),
        reported_once: HashSet::new(),
        failed: false,
    };
    for (i, typed) in typed {
        if let Typed::Site(site) = typed {
            resolver.site(*i, site);
        }
    }
    for (i, typed) in typed {
        if let Typed::Profile(profile) = typed {
            resolver.profile(*i, profile);
        }
    }
    for (i, typed) in typed {
        if let Typed::Site(site) = typed {
            resolver.default_profile(*i, site);
        }
    }
    let node_count = typed
        .iter()
        .map(|(_, t)| match t {
            Typed::NodeGroup(doc, _) => doc.spec.nodes.len(),
            Typed::Node(_) => 1,
            _ => 0,
        })
        .sum();
    let mut nodes = NodeChecks::with_capacity(node_count);
    let mut group_seen: HashMap<String, Provenance> = HashMap::new();
    for (i, typed) in typed {
        match typed {
            Typed::Node(doc) => {
                let input = NodeInput {
                    doc: *i,
                    base: field_path!["spec"].to_vec(),
                    hostname: &doc.metadata.name,
                    hostname_path: field_path!["metadata", "name"].to_vec(),
                    site: &doc.spec.site,
                    profile: doc.spec.profile.as_deref(),
                    sku: &doc.spec.sku,
                    gpus: doc.spec.gpus,
                    fields: &doc.spec.fields,
                    group: None,
                };
                resolver.node(&input, &mut nodes);
            }
            Typed::NodeGroup(doc, indices) => {
                resolver.group(*i, doc, indices, &mut group_seen, &mut nodes);
            }
            _ => {}
        }
    }
    resolver.unused_profiles();
    resolver.unmatched_overrides(typed);
    if resolver.failed {
        return None;
    }
    Some(Fleet {
        revision,
        sites: resolver.sites,
        profiles: resolver.profiles,
        nodes: resolver.nodes,
        groups: resolver.groups,
    })
}

fn declared_names(documents: &[ParsedDocument]) -> Declared {
    let mut declared = Declared::default();
    for doc in documents {
        let text = |path: &[&str]| {
            let mut node = &doc.root;
            for key in path {
                node = node.get(key)?;
            }
            node.as_str().map(str::to_string)
        };
        let Some(name) = text(&["metadata", "name"]) else {
            continue;
        };
        match text(&["kind"]).as_deref() {
            Some("Site") => {
                if let Some(default) = text(&["spec", "defaultProfile"]) {
                    declared
                        .default_profiles
                        .entry(name.clone())
                        .or_insert(default);
                }
                declared.sites.insert(name);
            }
            Some("Profile") => {
                declared
                    .profiles
                    .entry(name)
                    .or_insert_with(|| text(&["metadata", "site"]));
            }
            _ => {}
        }
    }
    declared
}

/// Pick the document's kind, check it against the kind's schema, and deserialise what passed.
pub(super) fn classify(doc: &ParsedDocument, findings: &mut Findings) -> Option<Typed> {
    if !matches!(doc.root.value, Value::Map(_)) {
        findings.error(
            doc,
            &[],
            "not-a-mapping",
            format!(
                "a manifest document must be a mapping with apiVersion, kind, metadata and spec, found {}",
                doc.root.type_name()
            ),
            None,
        );
        return None;
    }
    let kinds = Kind::ALL.map(Kind::as_str).join(", ");
    let kind = match doc.root.get("kind") {
        None => {
            findings.error(
                doc,
                &[],
                "missing-field",
                "missing required field `kind`".into(),
                Some(format!("kind is one of {kinds}")),
            );
            return None;
        }
        Some(node) => match node.as_str() {
            Some(text) => match Kind::parse(text) {
                Some(kind) => kind,
                None => {
                    let hint = did_you_mean(text, Kind::ALL.map(Kind::as_str))
                        .map(|k| format!("did you mean `{k}`?"))
                        .unwrap_or_else(|| format!("kind is one of {kinds}"));
                    findings.error(
                        doc,
                        &field_path!["kind"],
                        "unknown-kind",
                        format!("unknown kind `{text}`"),
                        Some(hint),
                    );
                    return None;
                }
            },
            None => {
                findings.error(
                    doc,
                    &field_path!["kind"],
                    "wrong-type",
                    format!("expected a string, found {}", node.type_name()),
                    Some(format!("kind is one of {kinds}")),
                );
                return None;
            }
        },
    };
    let mut json = doc.root.to_json();
    let schema_findings = schema::validate(kind, &json);
    for f in &schema_findings {
        findings.add(
            Severity::Error,
            doc,
            &f.path,
            f.at_key,
            f.code,
            f.message.clone(),
            f.hint.clone(),
        );
    }
    let deserialize = |json: Json| -> Result<Typed, serde_json::Error> {
        Ok(match kind {
            Kind::Site => Typed::Site(serde_json::from_value(json)?),
            Kind::Profile => Typed::Profile(serde_json::from_value(json)?),
            Kind::Node => Typed::Node(serde_json::from_value(json)?),
            Kind::NodeGroup => {
                let doc: NodeGroupDocument = serde_json::from_value(json)?;
                let indices = (0..doc.spec.nodes.len()).collect();
                Typed::NodeGroup(doc, indices)
            }
        })
    };
    let result = if schema_findings.is_empty() {
        deserialize(json)
    } else if let Some(bad) = (kind == Kind::NodeGroup)
        .then(|| bad_group_entries(&schema_findings))
        .flatten()
    {
        // Only some members are wrong: keep checking the rest of the group.
        let Some(Json::Array(entries)) = json.pointer_mut("/spec/nodes") else {
            return None;
        };
        let kept: Vec<(usize, Json)> = std::mem::take(entries)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !bad.contains(i))
            .collect();
        let indices: Vec<usize> = kept.iter().map(|(i, _)| *i).collect();
        *entries = kept.into_iter().map(|(_, entry)| entry).collect();
        deserialize(json).map(|typed| match typed {
            Typed::NodeGroup(doc, _) => Typed::NodeGroup(doc, indices),
            other => other,
        })
    } else {
        return None;
    };
    match result {
        Ok(typed) => Some(typed),
        Err(err) => {
            // The schema and the typed documents disagree: a bug, reported rather than hidden.
            findings.error(
                doc,
                &[],
                "schema-model-mismatch",
                format!(
                    "the document passed schema/{} but does not fit metalform's model: {err}",
                    kind.schema_file()
                ),
                Some("this is a bug in metalform; please report it with the document".into()),
            );
            None
        }
    }
}

/// The member indices the findings point into, when every finding is inside a member
/// (`spec.nodes[i]...`) — then the other members can still be checked.
fn bad_group_entries(findings: &[schema::SchemaFinding]) -> Option<BTreeSet<usize>> {
    findings
        .iter()
        .map(|f| match f.path.as_slice() {
            [
                PathSegment::Key(spec),
                PathSegment::Key(nodes),
                PathSegment::Index(i),
                _,
                ..,
            ] if spec == "spec" && nodes == "nodes" => Some(*i),
            _ => None,
        })
        .collect()
}

/// One node to resolve: a Node document, or one entry of a NodeGroup.
struct NodeInput<'a> {
    doc: usize,
    /// Where the per-node fields live: `spec` or `spec.nodes[i]`.
    base: Vec<PathSegment>,
    hostname: &'a str,
    hostname_path: Vec<PathSegment>,
    site: &'a str,
    profile: Option<&'a str>,
    sku: &'a str,
    gpus: u32,
    fields: &'a NodeFieldsSpec,
    group: Option<(&'a str, &'a NodeGroupSpec)>,
}

/// What earlier nodes claimed within their site, for the duplicate checks. Keys borrow from
/// the documents; values index `claimed` (hostname and position of the claiming node), so a
/// 10,000-node fleet costs a few map inserts per node and no string copies.
#[derive(Default)]
struct NodeChecks<'t> {
    claimed: Vec<(&'t str, Provenance)>,
    hostnames: HashMap<(&'t str, &'t str), usize>,
    bmcs: HashMap<(&'t str, Ipv4Addr), usize>,
    macs: HashMap<(&'t str, MacAddr), usize>,
    roce: HashMap<(&'t str, Ipv4Addr), (usize, &'t str)>,
    /// Redfish server serials, fleet-wide (the jobs API names servers by them).
    serials: HashMap<&'t str, usize>,
}

impl NodeChecks<'_> {
    fn with_capacity(nodes: usize) -> Self {
        NodeChecks {
            claimed: Vec::with_capacity(nodes),
            hostnames: HashMap::with_capacity(nodes),
            bmcs: HashMap::with_capacity(nodes),
            macs: HashMap::new(),
            roce: HashMap::with_capacity(nodes * 2),
            serials: HashMap::new(),
        }
    }
}

struct Resolver<'a, 'f> {
    documents: &'a [ParsedDocument],
    findings: &'f mut Findings,
    declared: Declared,
    sites: BTreeMap<SiteName, Site>,
    site_seen: HashMap<String, Provenance>,
    profiles: BTreeMap<ProfileName, Profile>,
    profile_seen: HashMap<String, Provenance>,
    nodes: BTreeMap<NodeId, Node>,
    groups: BTreeMap<GroupName, GroupPolicy>,
    /// (document, check) pairs already reported, so a group-level problem is reported once,
    /// not once per member.
    reported_once: HashSet<(usize, &'static str)>,
    /// A semantic error was found.
    failed: bool,
}

/// A URL whose host is this machine (127.0.0.0/8, ::1, localhost).
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

fn secret(spec: &SecretRefSpec) -> SecretRef {
    SecretRef::new(spec.vault.clone(), spec.key.as_deref())
}

fn with(base: &[PathSegment], rest: &[&'static str]) -> Vec<PathSegment> {
    let mut path = base.to_vec();
    path.extend(rest.iter().map(|k| PathSegment::from(*k)));
    path
}

impl<'a> Resolver<'a, '_> {
    fn error(
        &mut self,
        doc: usize,
        path: &[PathSegment],
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.failed = true;
        self.findings
            .error(&self.documents[doc], path, code, message, hint);
    }

    fn error_once(
        &mut self,
        doc: usize,
        path: &[PathSegment],
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        if self.reported_once.insert((doc, code)) {
            self.error(doc, path, code, message, hint);
        } else {
            self.failed = true;
        }
    }

    fn warning(
        &mut self,
        doc: usize,
        path: &[PathSegment],
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.findings
            .warning(&self.documents[doc], path, code, message, hint);
    }

    /// Where `path` is in document `doc`.
    fn provenance(&self, doc: usize, path: &[PathSegment]) -> Provenance {
        let document = &self.documents[doc];
        let located = document.root.locate(path);
        let pos = if located.found {
            located.value_pos
        } else {
            located.key_pos.unwrap_or(located.value_pos)
        };
        Provenance {
            file: document.file.to_string(),
            line: pos.line,
            column: pos.column,
        }
    }

    /// Record a document name; false (and an error) when the kind already has it.
    fn claim_name(
        &mut self,
        kind: Kind,
        doc: usize,
        name: &str,
        seen_in: fn(&mut Self) -> &mut HashMap<String, Provenance>,
    ) -> bool {
        let path = field_path!["metadata", "name"];
        let here = self.provenance(doc, &path);
        if let Some(first) = seen_in(self).get(name).cloned() {
            self.error(
                doc,
                &path,
                "duplicate-name",
                format!("{} `{name}` is already defined at {first}", kind.as_str()),
                Some(format!(
                    "{} names must be unique; rename or remove one of them",
                    kind.as_str()
                )),
            );
            return false;
        }
        seen_in(self).insert(name.to_string(), here);
        true
    }

    fn unknown_site_hint(&self, name: &str) -> String {
        did_you_mean(name, self.declared.sites.iter().map(String::as_str))
            .map(|s| format!("did you mean `{s}`?"))
            .unwrap_or_else(|| {
                format!(
                    "declare a Site document named `{name}`, or use one of: {}",
                    join(&self.declared.sites)
                )
            })
    }

    fn unknown_profile_hint(&self, name: &str) -> String {
        did_you_mean(name, self.declared.profiles.keys().map(String::as_str))
            .map(|s| format!("did you mean `{s}`?"))
            .unwrap_or_else(|| {
                format!(
                    "declare a Profile document named `{name}`, or use one of: {}",
                    join(self.declared.profiles.keys())
                )
            })
    }

    /// The site's MAAS URL, when it is one metalform will talk to: http(s) with a host, no
    /// user or password (the API key authenticates; a URL is shown in plans, diffs and logs),
    /// no query or fragment.
    fn maas_url(&mut self, doc: usize, text: &str, allow_http: bool) -> Option<url::Url> {
        let path = field_path!["spec", "maas", "url"];
        // Shown masked: a password written into the URL is not echoed back.
        let shown = crate::sanitize::redact::url(text);
        let problem = match url::Url::parse(text) {
            Ok(url) if !matches!(url.scheme(), "http" | "https") || !url.has_host() => {
                ("invalid-url", format!("`{shown}` is not an http(s) URL"))
            }
            Ok(url) if !url.username().is_empty() || url.password().is_some() => (
                "maas-url-credentials",
                format!(
                    "`{shown}` carries a user or password: the site's API key authenticates, and a URL is shown in plans, diffs and logs"
                ),
            ),
            Ok(url) if url.query().is_some() || url.fragment().is_some() => (
                "invalid-url",
                format!("`{shown}` has a query or fragment; write the MAAS base URL only"),
            ),
            // MAAS signs with OAuth PLAINTEXT: over http the API key's token secret crosses the
            // network in the clear. Loopback (a tunnel, the simulator) never leaves the host.
            Ok(url) if url.scheme() == "http" && !allow_http && !is_loopback(&url) => {
                self.error(
                    doc,
                    &path,
                    "insecure-url",
                    format!(
                        "`{shown}` is plain http: the site's API key would cross the network in the clear"
                    ),
                    Some(
                        "use https (MAAS serves TLS on port 5443, e.g. https://maas.example.net:5443/MAAS), or set maas.allowInsecureHttp: true to accept the risk"
                            .into(),
                    ),
                );
                return None;
            }
            Ok(url) => return Some(url),
            Err(_) => ("invalid-url", format!("`{shown}` is not an http(s) URL")),
        };
        self.error(
            doc,
            &path,
            problem.0,
            problem.1,
            Some("write the MAAS base URL, e.g. https://maas.example.net:5443/MAAS".into()),
        );
        None
    }

    fn site(&mut self, doc: usize, d: &SiteDocument) {
        if !self.claim_name(Kind::Site, doc, &d.metadata.name, |r| &mut r.site_seen) {
            return;
        }
        let spec = &d.spec;
        let mut ok = true;
        let allow_http = spec.maas.allow_insecure_http.unwrap_or(false);
        let url = self.maas_url(doc, &spec.maas.url, allow_http);
        ok &= url.is_some();
        let dns_text: Vec<String> = spec
            .network
            .upstream_dns
            .clone()
            .unwrap_or_else(|| vec!["1.1.1.1".into(), "8.8.8.8".into()]);
        let mut upstream_dns = Vec::new();
        for (i, text) in dns_text.iter().enumerate() {
            match text.parse::<Ipv4Addr>() {
                Ok(ip) => upstream_dns.push(ip),
                Err(_) => {
                    ok = false;
                    self.error(
                        doc,
                        &field_path!["spec", "network", "upstreamDns", i],
                        "invalid-ip",
                        format!("`{text}` is not an IPv4 address"),
                        None,
                    );
                }
            }
        }
        let mut overrides = Vec::new();
        let mut selectors: HashMap<PowerSelector, usize> = HashMap::new();
        for (i, o) in spec.power.overrides.iter().flatten().enumerate() {
            let (key, parsed) = match &o.selector {
                PowerMatchSpec::PxeMac(mac) => (
                    "pxeMac",
                    mac.parse::<MacAddr>()
                        .map(PowerSelector::PxeMac)
                        .map_err(|e| ("invalid-mac", e.to_string())),
                ),
                PowerMatchSpec::IpmiIp(ip) => (
                    "ipmiIp",
                    ip.parse::<Ipv4Addr>()
                        .map(PowerSelector::IpmiIp)
                        .map_err(|_| ("invalid-ip", format!("`{ip}` is not an IPv4 address"))),
                ),
                PowerMatchSpec::Hostname(host) => (
                    "hostname",
                    Ok(PowerSelector::Hostname(Hostname::new(host.clone()))),
                ),
            };
            let path = field_path!["spec", "power", "overrides", i, "match", key];
            match parsed {
                Ok(selector) => {
                    if let Some(first) = selectors.get(&selector) {
                        ok = false;
                        let first = self.provenance(
                            doc,
                            &field_path!["spec", "power", "overrides", *first, "match", key],
                        );
                        self.error(
                            doc,
                            &path,
                            "duplicate-override",
                            format!(
                                "another override already matches {key} {} at {first}",
                                selector.value()
                            ),
                            Some("keep one override per selector".into()),
                        );
                    } else {
                        selectors.insert(selector.clone(), i);
                        overrides.push(PowerOverride {
                            selector,
                            credentials: secret(&o.credentials),
                        });
                    }
                }
                Err((code, message)) => {
                    ok = false;
                    self.error(doc, &path, code, message, None);
                }
            }
        }
        let windows = self.windows(
            doc,
            &field_path!["spec", "maintenanceWindows"],
            spec.maintenance_windows.as_deref(),
        );
        let (Some(url), true, Some(maintenance_windows)) = (url, ok, windows) else {
            return;
        };
        let name = SiteName::new(d.metadata.name.clone());
        let site = Site {
            name: name.clone(),
            region: spec.region.clone(),
            status: spec.status.unwrap_or(SiteStatus::Active),
            maas: MaasEndpoint {
                url,
                api_key: secret(&spec.maas.api_key),
                allow_insecure_http: allow_http,
            },
            power: Power {
                kind: spec.power.kind.unwrap_or(PowerType::Ipmi),
                default_credentials: secret(&spec.power.default_credentials),
                overrides,
            },
            network: SiteNetwork {
                pxe_iface: spec.network.pxe_iface.clone(),
                pxe_vlan_vid: spec.network.pxe_vlan_vid,
                node_pxe_iface: spec.network.node_pxe_iface.clone(),
                upstream_dns,
            },
            deploy: DeployIdentity {
                user: spec
                    .deploy
                    .user
                    .clone()
                    .unwrap_or_else(|| "hpcadmin".into()),
                password: spec.deploy.password.as_ref().map(secret),
                node_passwords: spec.deploy.node_passwords.as_ref().map(secret),
                ssh_keys: spec.deploy.ssh_keys.clone().unwrap_or_default(),
                ssh_iface: spec
                    .deploy
                    .ssh_iface
                    .clone()
                    .unwrap_or_else(|| "eno8303".into()),
            },
            default_profile: spec.default_profile.clone().map(ProfileName::new),
            reconcile: ReconcilePolicy {
                prune: spec
                    .reconcile
                    .as_ref()
                    .and_then(|r| r.prune)
                    .unwrap_or(false),
                max_prune_percent: spec
                    .reconcile
                    .as_ref()
                    .and_then(|r| r.max_prune_percent)
                    .unwrap_or(crate::model::DEFAULT_MAX_PRUNE_PERCENT),
            },
            maintenance_windows,
            provenance: self.provenance(doc, &[]),
        };
        self.sites.insert(name, site);
    }

    /// The maintenance windows at `path` (a site's or a NodeGroup's); `None` after an error,
    /// each reported at its field.
    fn windows(
        &mut self,
        doc: usize,
        path: &[PathSegment],
        specs: Option<&[WindowSpec]>,
    ) -> Option<Vec<MaintenanceWindow>> {
        let mut windows = Vec::new();
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut ok = true;
        for (i, spec) in specs.unwrap_or_default().iter().enumerate() {
            let at = |field: &'static str| {
                let mut p = path.to_vec();
                p.push(PathSegment::from(i));
                p.push(PathSegment::from(field));
                p
            };
            if let Some(first) = names.insert(&spec.name, i) {
                ok = false;
                let first = self.provenance(doc, &at_index(path, first, "name"));
                self.error(
                    doc,
                    &at("name"),
                    "duplicate-window",
                    format!(
                        "maintenance window `{}` is already defined at {first}",
                        spec.name
                    ),
                    Some("give each window of a site or NodeGroup its own name".into()),
                );
            }
            let schedule = match Schedule::parse(&spec.schedule) {
                Ok(schedule) => Some(schedule),
                Err(err) => {
                    self.error(
                        doc,
                        &at("schedule"),
                        "invalid-schedule",
                        err.to_string(),
                        None,
                    );
                    None
                }
            };
            let time_zone = match TimeZone::parse(&spec.time_zone) {
                Ok(zone) => Some(zone),
                Err(err) => {
                    let hint = did_you_mean(&spec.time_zone, TimeZone::names())
                        .map(|s| format!("did you mean `{s}`?"));
                    self.error(
                        doc,
                        &at("timeZone"),
                        "invalid-time-zone",
                        err.to_string(),
                        hint,
                    );
                    None
                }
            };
            let duration =
                self.duration(doc, &at("duration"), Some(&spec.duration), Duration::ZERO);
            match (schedule, time_zone, duration) {
                (Some(schedule), Some(time_zone), Some(duration)) => {
                    windows.push(MaintenanceWindow {
                        name: spec.name.clone(),
                        schedule,
                        duration,
                        time_zone,
                        onboarding: spec.onboarding.unwrap_or(WindowOnboarding::Anytime),
                    })
                }
                _ => ok = false,
            }
        }
        ok.then_some(windows)
    }

    fn duration(
        &mut self,
        doc: usize,
        path: &[PathSegment],
        text: Option<&str>,
        default: Duration,
    ) -> Option<Duration> {
        let Some(text) = text else {
            return Some(default);
        };
        match duration::parse(text) {
            Ok(value) => Some(value),
            Err(err) => {
                self.error(doc, path, "invalid-duration", err.to_string(), None);
                None
            }
        }
    }

    /// A profile's deploy-user policy, checked against itself and against what it needs from
    /// its site (a password needs somewhere to come from).
    fn deploy_user(
        &mut self,
        doc: usize,
        spec: Option<&DeployUserSpec>,
        site_name: &str,
    ) -> DeployUserPolicy {
        let default = DeployUserPolicy::default();
        let policy = DeployUserPolicy {
            sudo: spec.and_then(|s| s.sudo).unwrap_or(default.sudo),
            password: spec.and_then(|s| s.password).unwrap_or(default.password),
            ssh_password_login: spec
                .and_then(|s| s.ssh_password_login)
                .unwrap_or(default.ssh_password_login),
        };
        let path = |field: &'static str| field_path!["spec", "deployUser", field];
        let hint = "set password: perNode (a random password per node, kept in the secret store)";
        if policy.password == DeployPassword::None {
            if policy.sudo == SudoPolicy::Password {
                self.error(
                    doc,
                    &path("sudo"),
                    "deploy-user-policy",
                    "`sudo: password` needs a password, but `password` is none".into(),
                    Some(hint.into()),
                );
            }
            if policy.ssh_password_login {
                self.error(
                    doc,
                    &path("sshPasswordLogin"),
                    "deploy-user-policy",
                    "`sshPasswordLogin: true` needs a password, but `password` is none".into(),
                    Some(hint.into()),
                );
            }
        }
        let (node_passwords, site_password) =
            self.sites
                .get(&SiteName::new(site_name))
                .map_or((true, true), |s| {
                    (
                        s.deploy.node_passwords.is_some(),
                        s.deploy.password.is_some(),
                    )
                });
        let missing = match policy.password {
            DeployPassword::PerNode if !node_passwords => Some((
                "`password: perNode` needs the site's deploy.nodePasswords: where the per-node passwords are kept",
                format!(
                    "add nodePasswords: {{vault: kv/maas-sites/{site_name}/deploy-nodes}} under deploy in site {site_name}"
                ),
            )),
            DeployPassword::Site if !site_password => Some((
                "`password: site` needs the site's deploy.password",
                format!(
                    "add password: {{vault: …, key: password}} under deploy in site {site_name}, or use password: perNode"
                ),
            )),
            _ => None,
        };
        if let Some((message, hint)) = missing {
            self.error(
                doc,
                &path("password"),
                "deploy-user-policy",
                message.into(),
                Some(hint),
            );
        }
        policy
    }

    fn profile(&mut self, doc: usize, d: &ProfileDocument) {
        if !self.claim_name(Kind::Profile, doc, &d.metadata.name, |r| {
            &mut r.profile_seen
        }) {
            return;
        }
        let site_name = &d.metadata.site;
        if !self.declared.sites.contains(site_name) {
            let hint = self.unknown_site_hint(site_name);
            self.error(
                doc,
                &field_path!["metadata", "site"],
                "unknown-site",
                format!("unknown site `{site_name}`"),
                Some(hint),
            );
        }
        let spec = &d.spec;
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let hw = spec.hardware_sync.as_ref();
        let interval = self.duration(
            doc,
            &field_path!["spec", "hardwareSync", "interval"],
            hw.and_then(|h| h.interval.as_deref()),
            minutes(15),
        );
        let token_ttl = self.duration(
            doc,
            &field_path!["spec", "enrollment", "tokenTtl"],
            spec.enrollment
                .as_ref()
                .and_then(|e| e.token_ttl.as_deref()),
            minutes(120),
        );
        let t = spec.timeouts.as_ref();
        let defaults = Timeouts::defaults();
        let timeout =
            |r: &mut Self, key: &'static str, value: Option<&String>, default: Duration| {
                r.duration(
                    doc,
                    &field_path!["spec", "timeouts", key],
                    value.map(String::as_str),
                    default,
                )
            };
        let discovery = timeout(
            self,
            "discovery",
            t.and_then(|t| t.discovery.as_ref()),
            defaults.discovery,
        );
        let commission = timeout(
            self,
            "commission",
            t.and_then(|t| t.commission.as_ref()),
            defaults.commission,
        );
        let deploy = timeout(
            self,
            "deploy",
            t.and_then(|t| t.deploy.as_ref()),
            defaults.deploy,
        );
        let hw_sync_seed = timeout(
            self,
            "hwSyncSeed",
            t.and_then(|t| t.hw_sync_seed.as_ref()),
            defaults.hw_sync_seed,
        );
        let hw_sync_health = timeout(
            self,
            "hwSyncHealth",
            t.and_then(|t| t.hw_sync_health.as_ref()),
            defaults.hw_sync_health,
        );
        let enrollment = timeout(
            self,
            "enrollment",
            t.and_then(|t| t.enrollment.as_ref()),
            defaults.enrollment,
        );
        let agent_task = timeout(
            self,
            "agentTask",
            t.and_then(|t| t.agent_task.as_ref()),
            defaults.agent_task,
        );
        let release_timeout = timeout(
            self,
            "release",
            t.and_then(|t| t.release.as_ref()),
            defaults.release,
        );
        let power_off = timeout(
            self,
            "powerOff",
            t.and_then(|t| t.power_off.as_ref()),
            defaults.power_off,
        );
        let pattern = spec
            .storage
            .boot_disk
            .as_ref()
            .and_then(|b| b.pattern.as_deref())
            .unwrap_or(BootDiskMatch::DEFAULT_PATTERN);
        let boot_disk = match BootDiskMatch::new(pattern) {
            Ok(matcher) => Some(matcher),
            Err(err) => {
                // regex errors are multi-line with a caret drawing; the last line says what is wrong.
                let reason = err.to_string();
                let reason = reason
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim()
                    .trim_start_matches("error: ")
                    .to_string();
                self.error(
                    doc,
                    &field_path!["spec", "storage", "bootDisk", "match"],
                    "invalid-regex",
                    format!("`{pattern}` is not a valid regular expression: {reason}"),
                    Some("the pattern uses Rust regex syntax: https://docs.rs/regex/latest/regex/#syntax".into()),
                );
                None
            }
        };
        let hardware_sync_required = hw.and_then(|h| h.required).unwrap_or(true);
        if !hardware_sync_required {
            self.warning(
                doc,
                &field_path!["spec", "hardwareSync", "required"],
                "hardware-sync-optional",
                "hardware sync is a required invariant for MAAS-managed nodes (MAAS keeps its view of the machine current through it): nodes of this profile may become active without it".into(),
                None,
            );
        }
        if let (Some(ttl), Some(deploy), Some(enrollment)) = (token_ttl, deploy, enrollment)
            && ttl <= deploy + enrollment
        {
            self.warning(
                doc,
                &field_path!["spec", "enrollment", "tokenTtl"],
                "short-token-ttl",
                format!(
                    "enrollment.tokenTtl {} does not outlast timeouts.deploy + timeouts.enrollment ({}): a token can expire before the node enrolls",
                    duration::format(ttl),
                    duration::format(deploy + enrollment)
                ),
                Some("make tokenTtl longer than deploy plus first boot".into()),
            );
        }
        let deploy_user = self.deploy_user(doc, spec.deploy_user.as_ref(), site_name);
        let site = self.sites.get(&SiteName::new(site_name.clone()));
        let (
            Some(site),
            Some(interval),
            Some(token_ttl),
            Some(discovery),
            Some(commission),
            Some(deploy),
            Some(hw_sync_seed),
            Some(hw_sync_health),
            Some(enrollment),
            Some(agent_task),
            Some(release_timeout),
            Some(power_off),
            Some(boot_disk),
        ) = (
            site,
            interval,
            token_ttl,
            discovery,
            commission,
            deploy,
            hw_sync_seed,
            hw_sync_health,
            enrollment,
            agent_task,
            release_timeout,
            power_off,
            boot_disk,
        )
        else {
            return;
        };
        let overrides = spec
            .network
            .as_ref()
            .map_or_else(NetworkOverrides::default, |n| NetworkOverrides {
                pxe_iface: n.pxe_iface.clone(),
                node_pxe_iface: n.node_pxe_iface.clone(),
                pxe_vlan_vid: n.pxe_vlan_vid,
            });
        let image = spec.image.as_ref();
        let release = spec.release.as_ref();
        let deploy_policy = spec.deploy.as_ref();
        let profile = Profile {
            name: ProfileName::new(d.metadata.name.clone()),
            site: site.name.clone(),
            image: Image {
                distro_series: image
                    .and_then(|i| i.distro_series.clone())
                    .unwrap_or_else(|| "ubuntu/noble".into()),
                architecture: image
                    .and_then(|i| i.architecture.clone())
                    .unwrap_or_else(|| "amd64/generic".into()),
            },
            storage: Storage {
                boot_disk,
                layout: spec.storage.layout.unwrap_or(StorageLayout::Flat),
                data_disks: spec.storage.data_disks,
            },
            roce: RocePolicy {
                enabled: spec.roce.as_ref().and_then(|r| r.enabled).unwrap_or(true),
            },
            hardware_sync: HardwareSync {
                required: hardware_sync_required,
                interval,
            },
            discovery: Discovery {
                auto_claim_single_new_machine: spec
                    .discovery
                    .as_ref()
                    .and_then(|d| d.auto_claim_single_new_machine)
                    .unwrap_or(false),
            },
            deploy_user,
            deploy: DeployPolicy {
                retry_on_datasource_failure: deploy_policy
                    .and_then(|d| d.retry_on_datasource_failure)
                    .unwrap_or(true),
                max_retry_attempts: deploy_policy
                    .and_then(|d| d.max_retry_attempts)
                    .unwrap_or(1),
            },
            release: ReleasePolicy {
                erase: release.and_then(|r| r.erase).unwrap_or(EraseMode::Quick),
                fallback_no_erase: release.and_then(|r| r.fallback_no_erase).unwrap_or(true),
            },
            preflight: Preflight {
                strict_pxe: spec
                    .preflight
                    .as_ref()
                    .and_then(|p| p.strict_pxe)
                    .unwrap_or(true),
            },
            concurrency: Concurrency {
                max_parallel: spec
                    .concurrency
                    .as_ref()
                    .and_then(|c| c.max_parallel)
                    .unwrap_or(10),
            },
            enrollment: Enrollment { token_ttl },
            timeouts: Timeouts {
                discovery,
                commission,
                deploy,
                hw_sync_seed,
                hw_sync_health,
                enrollment,
                agent_task,
                release: release_timeout,
                power_off,
            },
            cloud_init: CloudInit {
                site_bundle: spec
                    .cloud_init
                    .as_ref()
                    .and_then(|c| c.site_bundle.as_ref())
                    .map(|b| SiteBundle {
                        reference: b.reference.clone(),
                        version: b.version.clone(),
                    }),
            },
            network: ProfileNetwork {
                pxe_iface: overrides
                    .pxe_iface
                    .clone()
                    .unwrap_or_else(|| site.network.pxe_iface.clone()),
                node_pxe_iface: overrides
                    .node_pxe_iface
                    .clone()
                    .unwrap_or_else(|| site.network.node_pxe_iface.clone()),
                pxe_vlan_vid: overrides.pxe_vlan_vid.unwrap_or(site.network.pxe_vlan_vid),
            },
            network_overrides: overrides,
            provenance: self.provenance(doc, &[]),
        };
        self.profiles.insert(profile.name.clone(), profile);
    }

    /// A site's defaultProfile must exist and belong to the site.
    fn default_profile(&mut self, doc: usize, d: &SiteDocument) {
        let Some(profile) = &d.spec.default_profile else {
            return;
        };
        let path = field_path!["spec", "defaultProfile"];
        match self.declared.profiles.get(profile) {
            None => {
                let hint = self.unknown_profile_hint(profile);
                self.error(
                    doc,
                    &path,
                    "unknown-profile",
                    format!("unknown profile `{profile}`"),
                    Some(hint),
                );
            }
            Some(Some(owner)) if owner != &d.metadata.name => {
                let site = &d.metadata.name;
                self.error(
                    doc,
                    &path,
                    "profile-site-mismatch",
                    format!("profile `{profile}` belongs to site `{owner}`, not `{site}`"),
                    Some(format!("pick a profile whose metadata.site is `{site}`")),
                );
            }
            Some(_) => {}
        }
    }

    fn group<'t>(
        &mut self,
        doc: usize,
        d: &'t NodeGroupDocument,
        indices: &[usize],
        seen: &mut HashMap<String, Provenance>,
        nodes: &mut NodeChecks<'t>,
    ) {
        let name = &d.metadata.name;
        let name_path = field_path!["metadata", "name"];
        if let Some(first) = seen.get(name).cloned() {
            self.error(
                doc,
                &name_path,
                "duplicate-name",
                format!("NodeGroup `{name}` is already defined at {first}"),
                Some("NodeGroup names must be unique; rename or remove one of them".into()),
            );
        } else {
            seen.insert(name.clone(), self.provenance(doc, &name_path));
        }
        let total = match self.documents[doc]
            .root
            .get("spec")
            .and_then(|s| s.get("nodes"))
            .map(|n| &n.value)
        {
            Some(Value::Seq(items)) => items.len(),
            _ => 0,
        };
        if let Some(windows) = self.windows(
            doc,
            &field_path!["spec", "maintenanceWindows"],
            d.spec.maintenance_windows.as_deref(),
        ) && !windows.is_empty()
        {
            self.groups.insert(
                GroupName::new(name.clone()),
                GroupPolicy {
                    maintenance_windows: windows,
                },
            );
        }
        if total == 0 {
            self.warning(
                doc,
                &field_path!["spec", "nodes"],
                "empty-group",
                format!("NodeGroup `{name}` has no nodes"),
                None,
            );
        }
        for (entry, &index) in d.spec.nodes.iter().zip(indices) {
            let input = NodeInput {
                doc,
                base: field_path!["spec", "nodes", index].to_vec(),
                hostname: &entry.hostname,
                hostname_path: field_path!["spec", "nodes", index, "hostname"].to_vec(),
                site: &d.spec.site,
                profile: d.spec.profile.as_deref(),
                sku: &d.spec.sku,
                gpus: d.spec.gpus,
                fields: &entry.fields,
                group: Some((name, &d.spec)),
            };
            self.node(&input, nodes);
        }
    }

    fn node<'t>(&mut self, input: &NodeInput<'t>, checks: &mut NodeChecks<'t>) {
        let doc = input.doc;
        let site = input.site;
        let fields = input.fields;
        let mut ok = true;

        // References (reported once per document: a group shares them).
        let site_path = field_path!["spec", "site"];
        if !self.declared.sites.contains(site) {
            let hint = self.unknown_site_hint(site);
            self.error_once(
                doc,
                &site_path,
                "unknown-site",
                format!("unknown site `{site}`"),
                Some(hint),
            );
            ok = false;
        }
        let profile = match input.profile {
            Some(profile) => {
                let path = field_path!["spec", "profile"];
                match self.declared.profiles.get(profile) {
                    None => {
                        let hint = self.unknown_profile_hint(profile);
                        self.error_once(
                            doc,
                            &path,
                            "unknown-profile",
                            format!("unknown profile `{profile}`"),
                            Some(hint),
                        );
                        ok = false;
                    }
                    Some(Some(owner)) if owner != site && self.declared.sites.contains(site) => {
                        self.error_once(
                            doc,
                            &path,
                            "profile-site-mismatch",
                            format!("profile `{profile}` belongs to site `{owner}`, not `{site}`"),
                            Some(format!(
                                "use a profile of site `{site}`, or move the node to site `{owner}`"
                            )),
                        );
                        ok = false;
                    }
                    Some(_) => {}
                }
                Some(profile.to_string())
            }
            None => match self.declared.default_profiles.get(site) {
                Some(default) => Some(default.clone()),
                None => {
                    if self.declared.sites.contains(site) {
                        self.error_once(
                            doc,
                            &site_path,
                            "missing-profile",
                            format!("no profile: the node names none and site `{site}` has no defaultProfile"),
                            Some(format!("set spec.profile, or spec.defaultProfile on site `{site}`")),
                        );
                    }
                    ok = false;
                    None
                }
            },
        };

        // Identity within the site.
        let here = self.provenance(doc, &input.base);
        // Duplicates point at where the first node's hostname is written (a Node's
        // `metadata.name`, a group entry's `hostname`), the line to change.
        let this = checks.claimed.len();
        checks
            .claimed
            .push((input.hostname, self.provenance(doc, &input.hostname_path)));
        if let Some(&first) = checks.hostnames.get(&(site, input.hostname)) {
            let first = &checks.claimed[first].1;
            self.error(
                doc,
                &input.hostname_path,
                "duplicate-hostname",
                format!(
                    "hostname `{}` is already defined at site `{site}` at {first}",
                    input.hostname
                ),
                Some("a hostname names one machine per site; remove or rename one of them".into()),
            );
            ok = false;
        } else {
            checks.hostnames.insert((site, input.hostname), this);
        }

        let bmc_path = || with(&input.base, &["bmc", "ipmiIp"]);
        let ipmi_ip = match fields.bmc.ipmi_ip.parse::<Ipv4Addr>() {
            Ok(ip) => {
                if let Some(&first) = checks.bmcs.get(&(site, ip)) {
                    let (other, first) = &checks.claimed[first];
                    self.error(
                        doc,
                        &bmc_path(),
                        "duplicate-bmc",
                        format!("BMC address {ip} is already used by `{other}` at {first}"),
                        Some("each machine has its own BMC; check for a copy-paste slip".into()),
                    );
                    ok = false;
                } else {
                    checks.bmcs.insert((site, ip), this);
                }
                Some(ip)
            }
            Err(_) => {
                self.error(
                    doc,
                    &bmc_path(),
                    "invalid-ip",
                    format!("`{}` is not an IPv4 address", fields.bmc.ipmi_ip),
                    None,
                );
                None
            }
        };

        let mac_path = || with(&input.base, &["pxeMac"]);
        let mut pxe_mac = None;
        if let Some(text) = &fields.pxe_mac {
            match text.parse::<MacAddr>() {
                Ok(mac) => {
                    if let Some(&first) = checks.macs.get(&(site, mac)) {
                        let (other, first) = &checks.claimed[first];
                        self.error(
                            doc,
                            &mac_path(),
                            "duplicate-mac",
                            format!("PXE MAC {mac} is already used by `{other}` at {first}"),
                            None,
                        );
                        ok = false;
                    } else {
                        checks.macs.insert((site, mac), this);
                    }
                    pxe_mac = Some(mac);
                }
                Err(err) => {
                    self.error(doc, &mac_path(), "invalid-mac", err.to_string(), None);
                    ok = false;
                }
            }
        }

        let mut roce = Vec::new();
        let mut interfaces: HashSet<&str> = HashSet::new();
        for (j, assignment) in fields.roce.iter().flatten().enumerate() {
            let roce_path = || {
                let mut path = input.base.clone();
                path.extend(field_path!["roce", j]);
                path
            };
            if !interfaces.insert(&assignment.interface) {
                self.error(
                    doc,
                    &with(&roce_path(), &["interface"]),
                    "duplicate-roce-interface",
                    format!("interface `{}` already has a RoCE assignment on this node", assignment.interface),
                    Some("one address per interface: each (site, hostname, interface) has one RoCE address".into()),
                );
                ok = false;
                continue;
            }
            let address_path = || with(&roce_path(), &["address"]);
            let address = match assignment.address.parse::<InterfaceAddr>() {
                Ok(address) => address,
                Err(err) => {
                    self.error(doc, &address_path(), "invalid-cidr", err.to_string(), None);
                    ok = false;
                    continue;
                }
            };
            if address.prefix_len <= 30
                && (address.address == address.network().address || is_broadcast(address))
            {
                self.error(
                    doc,
                    &address_path(),
                    "invalid-cidr",
                    format!(
                        "{address} is the {} address of its subnet, not a host address",
                        if is_broadcast(address) {
                            "broadcast"
                        } else {
                            "network"
                        }
                    ),
                    None,
                );
                ok = false;
                continue;
            }
            let roce_key = (site, address.address);
            if let Some(&(first, iface)) = checks.roce.get(&roce_key) {
                let (other, first) = &checks.claimed[first];
                self.error(
                    doc,
                    &address_path(),
                    "duplicate-roce-address",
                    format!(
                        "RoCE address {} is already assigned to `{other}` {iface} at {first}",
                        address.address
                    ),
                    None,
                );
                ok = false;
                continue;
            }
            checks.roce.insert(roce_key, (this, &assignment.interface));
            roce.push(RoceAssignment {
                interface: assignment.interface.clone(),
                address,
            });
        }
        roce.sort_by(|a, b| a.interface.cmp(&b.interface));

        // Lifecycle rules (seed 004: a retired node carries its reason).
        let lifecycle = fields.lifecycle.unwrap_or(Lifecycle::Active);
        let reason = fields
            .retired_reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if lifecycle == Lifecycle::Retired && reason.is_none() {
            self.error(
                doc,
                &with(&input.base, &["lifecycle"]),
                "retired-without-reason",
                "lifecycle is retired but retiredReason is missing".into(),
                Some("add retiredReason: <why>, e.g. \"warranty ended 2025-06\"".into()),
            );
            ok = false;
        }
        if lifecycle != Lifecycle::Retired && reason.is_some() {
            self.warning(
                doc,
                &with(&input.base, &["retiredReason"]),
                "reason-without-retirement",
                format!("retiredReason is ignored: lifecycle is {lifecycle}"),
                None,
            );
        }
        let group_spec = input.group.map(|(_, spec)| spec);
        let protected = fields
            .protected
            .or(group_spec.and_then(|g| g.protected))
            .unwrap_or(false);
        let paused = fields
            .paused
            .or(group_spec.and_then(|g| g.paused))
            .unwrap_or(false);
        if protected && lifecycle != Lifecycle::Active {
            self.warning(
                doc,
                &with(&input.base, &["lifecycle"]),
                "protected-blocks-lifecycle",
                format!("the node is protected, so the release that lifecycle {lifecycle} needs stays blocked"),
                Some("set protected: false when the node may be released".into()),
            );
        }

        // The provisioner (seed 003): MAAS, or metalform's Redfish provisioner.
        let provisioner = super::provisioner::resolve(&super::provisioner::NodeSide {
            spec: fields.provisioner.as_ref(),
            site_power: self.sites.get(&SiteName::new(site)).map(|s| s.power.kind),
            ipmi_ip,
            pxe_mac: fields.pxe_mac.is_some(),
            roce: fields.roce.as_ref().is_some_and(|r| !r.is_empty()),
            lifecycle,
        });
        let provisioner = match provisioner {
            Ok(provisioner) => provisioner,
            Err(problems) => {
                for problem in problems {
                    let mut path = input.base.clone();
                    path.extend(problem.path);
                    self.error(doc, &path, problem.code, problem.message, problem.hint);
                }
                ok = false;
                Default::default()
            }
        };
        if let Some(serial) = fields
            .provisioner
            .as_ref()
            .and_then(|p| p.serial.as_deref())
            .filter(|_| provisioner.redfish().is_some())
        {
            if let Some(&first) = checks.serials.get(serial) {
                let (other, first) = &checks.claimed[first];
                self.error(
                    doc,
                    &with(&input.base, &["provisioner", "serial"]),
                    "duplicate-serial",
                    format!("serial `{serial}` is already used by `{other}` at {first}"),
                    Some("a serial names one server; check for a copy-paste slip".into()),
                );
                ok = false;
            } else {
                checks.serials.insert(serial, this);
            }
        }

        let (true, Some(ipmi_ip), Some(profile_name)) = (ok, ipmi_ip, profile) else {
            return;
        };
        let Some(profile) = self.profiles.get(&ProfileName::new(profile_name)) else {
            return;
        };
        if !self.sites.contains_key(&SiteName::new(site)) {
            return;
        }
        let own_decommission = fields.decommission.as_ref();
        let group_decommission = group_spec.and_then(|g| g.decommission.as_ref());
        let erase_override = own_decommission
            .and_then(|d| d.erase)
            .or(group_decommission.and_then(|d| d.erase));
        let node = Node {
            id: NodeId::new(site, input.hostname),
            profile: profile.name.clone(),
            sku: Sku::new(input.sku),
            gpus: input.gpus,
            bmc: Bmc { ipmi_ip },
            pxe_mac,
            roce,
            lifecycle,
            retired_reason: reason.map(str::to_string),
            reimage: Reimage {
                generation: fields
                    .reimage
                    .as_ref()
                    .and_then(|r| r.generation)
                    .unwrap_or(0),
            },
            decommission: Decommission {
                erase: erase_override.unwrap_or(profile.release.erase),
                erase_override,
                remove_from_maas: own_decommission
                    .and_then(|d| d.remove_from_maas)
                    .or(group_decommission.and_then(|d| d.remove_from_maas))
                    .unwrap_or(false),
            },
            protected,
            paused,
            group: input.group.map(|(name, _)| GroupName::new(name)),
            provisioner,
            provenance: here,
        };
        self.nodes.insert(node.id.clone(), node);
    }

    /// A profile no node uses and no site defaults to is probably a leftover.
    fn unused_profiles(&mut self) {
        let used: HashSet<&ProfileName> = self
            .nodes
            .values()
            .map(|n| &n.profile)
            .chain(
                self.sites
                    .values()
                    .filter_map(|s| s.default_profile.as_ref()),
            )
            .collect();
        let unused: Vec<(ProfileName, Provenance)> = self
            .profiles
            .values()
            .filter(|p| !used.contains(&p.name))
            .map(|p| (p.name.clone(), p.provenance.clone()))
            .collect();
        for (name, provenance) in unused {
            if let Some(doc) = self.document_at(&provenance) {
                self.warning(
                    doc,
                    &field_path!["metadata", "name"],
                    "unused-profile",
                    format!("profile `{name}` is used by no node and is no site's defaultProfile"),
                    None,
                );
            }
        }
    }

    /// A power-credential override that matches no node of its site is probably stale.
    fn unmatched_overrides(&mut self, typed: &[(usize, Typed)]) {
        for (doc, typed) in typed {
            let Typed::Site(d) = typed else { continue };
            let Some(site) = self.sites.get(&SiteName::new(d.metadata.name.clone())) else {
                continue;
            };
            let mut unmatched = Vec::new();
            for (i, o) in site.power.overrides.iter().enumerate() {
                let matched = self
                    .nodes
                    .values()
                    .filter(|n| n.id.site == site.name)
                    .any(|n| match &o.selector {
                        PowerSelector::PxeMac(mac) => n.pxe_mac == Some(*mac),
                        PowerSelector::IpmiIp(ip) => n.bmc.ipmi_ip == *ip,
                        PowerSelector::Hostname(host) => &n.id.hostname == host,
                    });
                if !matched {
                    unmatched.push((i, o.selector.key(), o.selector.value()));
                }
            }
            for (i, key, value) in unmatched {
                self.warning(
                    *doc,
                    &field_path!["spec", "power", "overrides", i, "match", key],
                    "unmatched-override",
                    format!("no node of this site has {key} {value}: the override is never used"),
                    None,
                );
            }
        }
    }

    fn document_at(&self, provenance: &Provenance) -> Option<usize> {
        self.documents.iter().position(|d| {
            *d.file == provenance.file
                && d.root.pos.line == provenance.line
                && d.root.pos.column == provenance.column
        })
    }
}

/// `path[index].field`.
fn at_index(path: &[PathSegment], index: usize, field: &'static str) -> Vec<PathSegment> {
    let mut p = path.to_vec();
    p.push(PathSegment::from(index));
    p.push(PathSegment::from(field));
    p
}

fn is_broadcast(address: InterfaceAddr) -> bool {
    let host_bits = 32 - u32::from(address.prefix_len);
    let host_mask = if host_bits == 32 {
        u32::MAX
    } else {
        (1u32 << host_bits) - 1
    };
    u32::from(address.address) & host_mask == host_mask
}

fn join<'s>(names: impl IntoIterator<Item = &'s String>) -> String {
    let names: Vec<&str> = names.into_iter().map(String::as_str).collect();
    if names.is_empty() {
        "(none declared)".into()
    } else {
        names.join(", ")
    }
}
