//! Tags, zones and resource pools as the API changes them (MAAS api/tags.py, api/zones.py,
//! api/resourcepools.py, api/support.py `admin_method`, forms TagForm/ZoneForm/
//! ResourcePoolForm).

use std::collections::BTreeMap;

use super::catalog::{Placement, Tag};
use super::model::Caller;
use super::reply::MaasError;
use super::transport::Params;
use super::world::World;

/// Zones or pools: which of the two a handler manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placements {
    Zones,
    Pools,
}

impl Placements {
    /// The model's name in messages (`No Zone matches the given query.`).
    fn model(self) -> &'static str {
        match self {
            Placements::Zones => "Zone",
            Placements::Pools => "ResourcePool",
        }
    }
}

fn admin_only(caller: &Caller) -> Result<(), MaasError> {
    if caller.is_admin() {
        Ok(())
    } else {
        Err(MaasError::Forbidden(String::new()))
    }
}

impl World {
    fn placements(&self, which: Placements) -> &BTreeMap<u64, Placement> {
        match which {
            Placements::Zones => &self.zones,
            Placements::Pools => &self.pools,
        }
    }

    fn placements_mut(&mut self, which: Placements) -> &mut BTreeMap<u64, Placement> {
        match which {
            Placements::Zones => &mut self.zones,
            Placements::Pools => &mut self.pools,
        }
    }

    /// A zone by name, a pool by id.
    pub fn find_placement(&self, which: Placements, key: &str) -> Result<u64, MaasError> {
        let found = match which {
            Placements::Zones => self.zones.values().find(|z| z.name == key),
            Placements::Pools => key.parse::<u64>().ok().and_then(|id| self.pools.get(&id)),
        };
        found.map(|p| p.id).ok_or_else(|| {
            MaasError::NotFound(format!("No {} matches the given query.", which.model()))
        })
    }

    /// `POST zones/` / `POST resourcepools/` (admin): a unique name, a description.
    pub fn create_placement(
        &mut self,
        caller: &Caller,
        which: Placements,
        p: &Params,
    ) -> Result<u64, MaasError> {
        admin_only(caller)?;
        let name = self.placement_name(which, p, None)?;
        let Some(name) = name else {
            return Err(MaasError::field("name", "This field is required."));
        };
        let id = self.placements(which).keys().last().map_or(0, |id| id + 1);
        self.placements_mut(which).insert(
            id,
            Placement {
                id,
                name,
                description: p.get("description").unwrap_or("").to_string(),
            },
        );
        Ok(id)
    }

    /// `PUT zones/{name}/` / `PUT resourcepool/{id}/` (admin).
    pub fn update_placement(
        &mut self,
        caller: &Caller,
        which: Placements,
        key: &str,
        p: &Params,
    ) -> Result<u64, MaasError> {
        admin_only(caller)?;
        let id = self.find_placement(which, key)?;
        let name = self.placement_name(which, p, Some(id))?;
        let old = self.placements(which)[&id].name.clone();
        let entry = self
            .placements_mut(which)
            .get_mut(&id)
            .ok_or_else(|| MaasError::NotFound(String::new()))?;
        if let Some(name) = &name {
            entry.name = name.clone();
        }
        if let Some(description) = p.get("description") {
            entry.description = description.to_string();
        }
        if let Some(new) = name.filter(|n| *n != old) {
            for m in self.machines.values_mut() {
                let slot = match which {
                    Placements::Zones => &mut m.zone,
                    Placements::Pools => &mut m.pool,
                };
                if *slot == old {
                    *slot = new.clone();
                }
            }
        }
        Ok(id)
    }

    /// `DELETE zones/{name}/` / `DELETE resourcepool/{id}/` (admin): the default one stays.
    pub fn delete_placement(
        &mut self,
        caller: &Caller,
        which: Placements,
        key: &str,
    ) -> Result<(), MaasError> {
        admin_only(caller)?;
        let id = self.find_placement(which, key)?;
        let entry = &self.placements(which)[&id];
        if entry.name == "default" {
            return Err(MaasError::BadRequest(match which {
                Placements::Zones => "This zone is the default zone, it cannot be deleted.".into(),
                Placements::Pools => "This is the default pool, it cannot be deleted.".into(),
            }));
        }
        let name = entry.name.clone();
        self.placements_mut(which).remove(&id);
        for m in self.machines.values_mut() {
            let slot = match which {
                Placements::Zones => &mut m.zone,
                Placements::Pools => &mut m.pool,
            };
            if *slot == name {
                *slot = "default".to_string();
            }
        }
        Ok(())
    }

    /// The `name` of a zone/pool form: unique among the others.
    fn placement_name(
        &self,
        which: Placements,
        p: &Params,
        except: Option<u64>,
    ) -> Result<Option<String>, MaasError> {
        let Some(name) = p.get("name").filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        if self
            .placements(which)
            .values()
            .any(|other| other.name == name && Some(other.id) != except)
        {
            return Err(MaasError::field(
                "name",
                format!("{} with this Name already exists.", which.model()),
            ));
        }
        Ok(Some(name.to_string()))
    }

    /// `GET tags/{name}/`: 404 `No Tag matches the given query.`
    pub fn find_tag(&self, name: &str) -> Result<&Tag, MaasError> {
        self.tags
            .get(name)
            .ok_or_else(|| MaasError::NotFound("No Tag matches the given query.".to_string()))
    }

    /// `POST tags/` (admin; TagForm: name `^[a-zA-Z0-9_-]+$`, unique).
    pub fn create_tag(&mut self, caller: &Caller, p: &Params) -> Result<String, MaasError> {
        admin_only(caller)?;
        let name = match p.get("name").filter(|n| !n.is_empty()) {
            None => return Err(MaasError::field("name", "This field is required.")),
            Some(name) => name,
        };
        self.check_tag(name, None, p)?;
        let tag = Tag {
            name: name.to_string(),
            definition: p.get("definition").unwrap_or("").to_string(),
            comment: p.get("comment").unwrap_or("").to_string(),
            kernel_opts: p.get("kernel_opts").unwrap_or("").to_string(),
        };
        self.tags.insert(tag.name.clone(), tag);
        Ok(name.to_string())
    }

    /// `PUT tags/{name}/` (admin): a new name renames it on every machine.
    pub fn update_tag(
        &mut self,
        caller: &Caller,
        name: &str,
        p: &Params,
    ) -> Result<String, MaasError> {
        admin_only(caller)?;
        let mut tag = self.find_tag(name)?.clone();
        let new_name = p.get("name").filter(|n| !n.is_empty()).unwrap_or(name);
        self.check_tag(new_name, Some(name), p)?;
        if let Some(definition) = p.get("definition") {
            tag.definition = definition.to_string();
        }
        if let Some(comment) = p.get("comment") {
            tag.comment = comment.to_string();
        }
        if let Some(kernel_opts) = p.get("kernel_opts") {
            tag.kernel_opts = kernel_opts.to_string();
        }
        tag.name = new_name.to_string();
        self.tags.remove(name);
        self.tags.insert(tag.name.clone(), tag);
        if new_name != name {
            for m in self.machines.values_mut() {
                for t in m.tag_names.iter_mut().filter(|t| *t == name) {
                    *t = new_name.to_string();
                }
            }
        }
        Ok(new_name.to_string())
    }

    /// `DELETE tags/{name}/` (admin).
    pub fn delete_tag(&mut self, caller: &Caller, name: &str) -> Result<(), MaasError> {
        admin_only(caller)?;
        self.find_tag(name)?;
        self.tags.remove(name);
        for m in self.machines.values_mut() {
            m.tag_names.retain(|t| t != name);
        }
        Ok(())
    }

    /// `POST tags/{name}/?op=update_nodes` (admin): `add`/`remove` system ids (unknown ones are
    /// ignored); a `definition` that is not the tag's is MAAS's 409 text.
    pub fn update_tag_nodes(
        &mut self,
        caller: &Caller,
        name: &str,
        p: &Params,
    ) -> Result<(usize, usize), MaasError> {
        admin_only(caller)?;
        let tag = self.find_tag(name)?;
        if let Some(definition) = p.get("definition")
            && definition != tag.definition
        {
            return Err(MaasError::Conflict(format!(
                "Definition supplied '{definition}' doesn't match current definition '{}'",
                tag.definition
            )));
        }
        let add: Vec<u64> = p
            .all("add")
            .iter()
            .filter_map(|s| self.machine_id(s))
            .collect();
        let remove: Vec<u64> = p
            .all("remove")
            .iter()
            .filter_map(|s| self.machine_id(s))
            .collect();
        for id in &add {
            if let Some(m) = self.machines.get_mut(id)
                && !m.tag_names.iter().any(|t| t == name)
            {
                m.tag_names.push(name.to_string());
                m.tag_names.sort();
            }
        }
        for id in &remove {
            if let Some(m) = self.machines.get_mut(id) {
                m.tag_names.retain(|t| t != name);
            }
        }
        Ok((add.len(), remove.len()))
    }

    fn check_tag(&self, name: &str, renaming: Option<&str>, p: &Params) -> Result<(), MaasError> {
        if !Tag::valid_name(name) {
            return Err(MaasError::field("name", "Enter a valid value."));
        }
        if Some(name) != renaming && self.tags.contains_key(name) {
            return Err(MaasError::field(
                "name",
                "Tag with this Name already exists.",
            ));
        }
        // clean_definition: an XPath expression, checked for balanced brackets and quotes.
        if let Some(definition) = p.get("definition").filter(|d| !d.is_empty())
            && !balanced(definition)
        {
            return Err(MaasError::field(
                "definition",
                format!("Invalid xpath expression: {definition}"),
            ));
        }
        Ok(())
    }
}

/// Brackets and quotes of an XPath expression pair up.
fn balanced(expression: &str) -> bool {
    let mut stack = Vec::new();
    let mut quote: Option<char> = None;
    for c in expression.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '(') => stack.push(c),
            (None, ']') if stack.pop() != Some('[') => return false,
            (None, ')') if stack.pop() != Some('(') => return false,
            _ => {}
        }
    }
    quote.is_none() && stack.is_empty()
}
